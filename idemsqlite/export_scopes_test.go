package idemsqlite

// ScopesQuery is the statement of Store.Scopes, for its plan test.
var ScopesQuery = Driver().Records().ForTable("idem_records").Scopes
