// Package migrate owns every table idem keeps in a SQL database, and brings them up
// to date.
//
// Each dialect (PostgreSQL, SQLite, MySQL/MariaDB) has one embedded migration set, under
// sql/<dialect>/<component>/, with one numbered line per component:
//
//	records    idem.Store's records (idempg, idemsqlite); on PostgreSQL one line per table name
//	outbox     idem_outbox (package outbox), idem_outbox_repairs (package audit); on PostgreSQL idem_cdc_slots (idempg/pgcdc)
//	inbox      idem_dead_letters (package inbox)
//	effect     idem_effects (package effect)
//	saga       idem_sagas (package effect/saga)
//	stream     idem_stream_heads, idem_stream_events, idem_stream_clients (package stream)
//	sequences  idem_sequences (idemseq's SQL tracker)
//	hilo       idem_hilo (idemsqlite.HiLoTable, idemmysql.HiLoTable; on PostgreSQL a Hi/Lo source is a sequence of its own)
//
// A migration is a pair of files, NNN_name.up.sql and NNN_name.down.sql, never
// edited once released: a change is a new number. What has been applied is recorded
// in the table idem_migrations (component name, version, file name, when), in the
// same transaction as the migration itself, so a migration is applied entirely or
// not at all.
//
// Every constructor that owns tables (idempg.New, idemsqlite.Open, outbox.New,
// inbox.New, effect.New, saga.New, stream.NewSQLStore, idemseq.NewSQLTracker)
// calls Up for the components it needs (Ensure). With its Config.SkipMigrate set it
// calls Require instead, and fails with a *BehindError naming the first missing
// migration if the schema is behind; it never runs DDL. (idemsqlite.HiLoTable and
// idemmysql.HiLoTable, which take no Config, always call Up for idem_hilo.)
// That is for teams whose migrations go through their own tool (goose,
// golang-migrate, atlas, flyway): `idem migrate print` writes the SQL, including the
// idem_migrations rows that Require checks.
//
// Up is safe to run from many processes at once and to run again. On PostgreSQL it
// holds a transaction-scoped advisory lock (one per schema) while it reads and
// applies; on SQLite its transaction takes the write lock with its first statement,
// and a transaction that still meets SQLITE_BUSY is tried again for a bounded time;
// on MySQL it holds GET_LOCK('idem.migrate:<database>'). MySQL commits DDL on its
// own, so there a migration interrupted half way is applied again: every statement
// of the MySQL set is written to allow that (IF NOT EXISTS, INSERT IGNORE).
//
// A newer schema than this build knows is accepted: migrations only add, so the
// previous release keeps working beside the next one during a rolling deploy.
package migrate
