package idemsqlite

// ScopesQuery is the statement of Store.Scopes, for its plan test.
const ScopesQuery = scopesSQL
