// Package idemsql is idem's SQL contract: how its transactional components
// (inbox, outbox, effect, saga, stream, idemseq, migrate) reach a database, and
// everything they say to it.
//
// A TxDB tells a component how to begin, commit and query transactions of one
// driver library (database/sql, pgx), so the same component runs on *sql.Tx and
// pgx.Tx, and the key of a message commits with the handler's own writes. Its
// Driver owns the statements: one family per component (RecordsSQL, OutboxSQL,
// InboxSQL, EffectSQL, SagaSQL, StreamSQL, SeqSQL, MigrateSQL), each field a
// documented statement with its arguments and columns. idempg, idemsqlite and
// idemmysql are the drivers; the components hold no SQL text and never ask which
// database they run on.
//
// Build a TxDB with a driver's constructor (idempg.TxDB for a pgx pool,
// idempg.SQLTxDB, idemsqlite.TxDB, idemmysql.TxDB for database/sql) or with
// SQLDB, which asks the database which it is and takes the driver registered for
// it.
//
// A new database is a package that implements Driver, adds its migrations to
// package migrate, and passes drivertest.Run; package sqlstore gives it the
// Inspector, ScopeLister and Sweeper of a records table over its RecordsSQL.
package idemsql
