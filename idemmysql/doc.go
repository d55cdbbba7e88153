// Package idemmysql is the MySQL and MariaDB backend of idem: an idem.Store whose
// claims and completions can join the application's own database/sql transaction,
// so the record of an effect commits or rolls back with the effect.
//
// Store implements idem.Store, idem.TxStore[*sql.Tx], idem.Sweeper and
// idem.Renewer on github.com/go-sql-driver/mysql, for MySQL 8.0 and MariaDB 10.6 or
// later with InnoDB, and passes idemtest's StoreSuite and TxStoreSuite.
//
//	store, err := idemmysql.Open(ctx, "mysql://app:secret@127.0.0.1:3306/shop", idemmysql.Config{})
//
// # Table
//
// New creates the table through package migrate (migrate/sql/mysql/records/), or
// with Config.SkipMigrate only checks it is up to date. Times are microseconds of
// the server's UTC clock, so leases do not depend on the clocks or time zones of the
// application's hosts or sessions.
//
// # How a claim works
//
// INSERT … ON DUPLICATE KEY UPDATE adds the key's row in progress with token 0, or
// takes the existing row's exclusive lock. A fresh row (told apart by
// LAST_INSERT_ID, whatever clientFoundRows says) then draws its token while the
// transaction holds its lock: NEXTVAL of the sequence Table+"_token_seq" on MariaDB,
// an AUTO_INCREMENT id from the table Table+"_tokens" on MySQL. Any later
// incarnation of the key (after a release, expiry or sweep) must wait for that lock,
// so it draws a larger token: tokens rise strictly per key. An existing row is read
// under the lock (FOR UPDATE sees the newest committed row whatever the isolation
// level) and answers the duplicate, or is taken over with a fresh token if it
// expired. Release ends the lease instead of deleting the row: a transaction that
// deletes a row and inserts it again deadlocks with the claimants queued on it. It
// ends the lease at 0, the Unix epoch, not at its own clock reading: a statement
// reads the clock when it starts, before it waits for a row lock, so a Complete or
// Renew of the same token that started just before the Release and waited for its
// lock would otherwise find the lease still live and succeed after the Release had.
//
// On MariaDB, Claim of a fresh key is one call of the procedure Table+"_claim"
// (migration 002), which runs the same statements in one round trip.
//
// # Group claims
//
// Concurrent Claims share round trips, like a group commit: a Claim that finds two
// claims already running waits in a queue, and the next runner to finish takes the
// whole queue (up to Config.MaxClaimGroup) to the server in one call of the
// procedure Table+"_claim_group" (migration 003): one transaction inserts or locks
// every key, then draws the new rows' tokens, and commits once. A lone caller never
// waits for a batch to fill: a group forms only from claims that would otherwise
// queue for the server. A runner never waits for a row lock (its calls run with
// innodb_lock_wait_timeout 0): a claim that meets a lock, or a key that is taken or
// expired, continues alone on a goroutine of its own, so a key held by a long
// transaction elsewhere holds up only its own claimants. MariaDB only (it needs the
// sequence, JSON_TABLE and SET STATEMENT); Config.MaxClaimGroup = 1 turns it off.
//
// # Isolation levels
//
// Every read the store makes is a locking read, so it behaves the same under
// REPEATABLE READ (InnoDB's default) and READ COMMITTED; both run the conformance
// suites in this package's tests. The difference is in locks: under REPEATABLE READ
// a locking read of a key with no row also locks the gap before the next key, so two
// claimants of new neighbouring keys in long transactions can deadlock. InnoDB then
// rolls one transaction back (error 1213): Claim, which runs its own transaction,
// tries again; ClaimTx returns an *idem.BackendError, and the caller retries its
// whole transaction as it would for any deadlock. READ COMMITTED takes no gap locks
// and is the better choice for busy tables.
//
// # Requirements
//
// InnoDB tables (the default engine); a strict sql_mode (New refuses a session
// without STRICT_TRANS_TABLES, where MySQL would cut a too-long value short with a
// warning); and, for the outbox relay and the stream store's Trim, which run READ
// COMMITTED transactions, binlog_format ROW or MIXED where the binary log is on (the
// defaults of MySQL 8 and MariaDB; STATEMENT refuses READ COMMITTED writes). Tested
// here on MariaDB 10.11; MySQL 8 is not packaged for this machine, so its paths
// (the AUTO_INCREMENT token table in place of MariaDB's sequence) run only where the
// sequence is missing.
//
// # Inspection
//
// The inspection, the list of scopes and the records gauge are package
// idemsql/sqlstore's, which every SQL store shares, over this driver's records
// statements (sql_records.go, checked by drivertest.Records).
//
// Store implements idem.Inspector and passes idemtest.InspectorSuite. A List page is
// one range of the primary key (scope, id), ids in ascending byte order (VARBINARY),
// its cursor the base64url of the page's last id. Evict reads the row FOR UPDATE and
// deletes it in one transaction; tokens come from the sequence or the AUTO_INCREMENT
// table, never from the row, so an evicted holder stays fenced. A released key keeps
// its row until swept, in progress with its lease ended at the epoch (ExpiresAt
// 1970-01-01), and Inspect and List show it so. Scopes
// (idem.ScopeLister) is SELECT DISTINCT scope over the primary key, a loose index
// scan ("Using index for group-by").
//
// A duplicate ClaimTx keeps the key's row locked until its transaction ends, so the
// holder's Complete waits for it: end transactions that met a duplicate promptly
// (they usually roll back at once).
//
// # Tracing
//
// With a TracerProvider (Config.TracerProvider, else the global one once the
// application sets it), each Claim, ClaimTx, Complete(Tx) and Release(Tx) is a
// client span, idem.store.claim, idem.store.complete or idem.store.release, a child
// of the caller's span, with idem.scope, idem.key, db.system.name "mysql", idem.tx
// on the Tx variants and, for a claim, idem.outcome (idem.token when acquired,
// idem.duplicate when the key was taken); ClaimBatch is one idem.store.claim_batch
// span. With no provider set, no span is started. A claim answered by the group
// writer (one statement for many claims) still has its own span, in its caller's
// trace.
package idemmysql
