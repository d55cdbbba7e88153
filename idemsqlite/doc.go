// Package idemsqlite is idem's embedded default store: an idem.Store,
// idem.TxStore[*sql.Tx], idem.Sweeper, idem.BatchClaimer and idem.Renewer on one
// SQLite file, through the pure-Go driver modernc.org/sqlite (no cgo).
//
//	store, err := idemsqlite.Open(ctx, "idem.db", idemsqlite.Config{})
//	...
//	defer store.Close()
//	go storekit.RunSweeper(ctx, store, time.Minute, nil) // delete expired records
//
// # Durability
//
// Open runs the file in WAL mode with synchronous=FULL: when Claim, Complete or
// Release returns, the write-ahead log holding it has been fsynced, so it survives a
// crash of the process or of the machine. Config.Synchronous = SyncNormal drops the
// fsync at commit; the file stays consistent, but the last commits before a power
// loss can be lost, and with them the memory that an effect already ran.
//
// # Group commit
//
// An fsync takes from tens of microseconds to milliseconds, by disk, so a store that
// commits each call on its own cannot do more claims per second than the disk does
// fsyncs. Claim, ClaimBatch, Complete, Release and Sweep therefore go to a single
// writer goroutine with its own connection. It takes every call queued while its
// previous commit was syncing (up to Config.MaxBatch), applies them in order in one
// BEGIN IMMEDIATE … COMMIT and answers each: concurrent callers share one fsync.
// A lone caller still pays a full commit: compare BenchmarkClaimSingle and
// BenchmarkClaimConcurrent with BenchmarkFsync, the disk's raw fsync rate.
// Store.Stats reports commits and calls, so Ops/Commits is the average group.
//
// Each call's answer is its own: one call whose SQL fails on its own data gets its
// error while the rest of its group is re-run and committed; a failure of the file
// itself (I/O error, disk full, busy timeout) fails the group with a retryable
// *idem.BackendError. A context that has ended before a call returns ctx.Err() and
// writes nothing; one that ends while the call is queued also returns ctx.Err(), and
// the call is never applied. Once the writer holds the write lock and has taken the
// call into its transaction, the call is applied and returns its true result even if
// the context ends meanwhile, which costs at most one commit of waiting: a claim that
// succeeded is never reported as failed, so no lease is orphaned by a timeout.
//
// A full disk (SQLITE_FULL) fails the group with an error matching ErrDiskFull that
// names the volume to free: nothing of those calls was stored, the writer keeps
// running, and the same Store takes writes again once there is room (see
// docs/operating.md, "Full disk"). A business transaction on Store.DB() gets
// SQLite's own error from the statements and Commit it runs itself; through the
// TxDB (TxDB, idemsql.SQLDB: its Begin, Commit, InTx, and the statements of
// outbox.EnqueueTx, the inbox's batch, the queue's producers) the error matches
// ErrDiskFull and says that nothing of the transaction was stored.
//
// # Transactions
//
// To commit the key with the effect, run the business transaction on Store.DB() (or
// another connection to the same file) and pass it to ClaimTx and CompleteTx:
//
//	tx, err := store.DB().BeginTx(ctx, nil)
//	res, err := store.ClaimTx(ctx, tx, idem.Claim{Key: key})
//	if res.Outcome == idem.Acquired {
//		// business writes in tx …
//		err = store.CompleteTx(ctx, tx, key, res.Token, nil)
//	}
//	err = tx.Commit()
//
// The Tx variants run on the caller's connection, not through the writer. Open sets
// _txlock=immediate, so BEGIN takes SQLite's write lock at once; a concurrent claimant
// of the same key waits (up to Config.BusyTimeout) and then sees Replayed after a
// commit or Acquired after a rollback.
//
// # One writer
//
// SQLite admits one writer at a time per file. The group-commit writer and callers'
// transactions take turns on that lock, so a long business transaction stalls every
// other write to the file, including the writer's groups. Keep transactions short,
// and do not call the non-Tx methods while holding a write transaction on the same
// file: the writer would wait for your lock until Config.BusyTimeout. Readers never
// block (WAL).
//
// # Fencing tokens
//
// A token is the larger of the clock in microseconds and one above the highest token
// ever issued on the file, which every token-issuing transaction keeps in the
// idem_meta table. Tokens therefore strictly increase per key across takeovers,
// releases, expiry, sweeps, restarts, clock steps and processes sharing the file. A
// process also remembers tokens handed out in transactions that were rolled back and
// never reissues them; another process sharing the file does not know those, but
// stays above them as long as tokens are issued more slowly than one per microsecond.
// The order holds however claims interleave with callers' transactions: a token is
// drawn inside the write transaction that writes the claim, and SQLite runs one such
// transaction at a time per file.
//
// # Renewing a lease
//
// Renew (idem.Renewer) moves a live holder's lease end to the given lease from now,
// through the group-commit writer like Release. It works on committed claims; a
// claim inside a caller's open transaction needs none, since every other writer
// waits for that transaction anyway.
//
// # Inspection
//
// The inspection, the list of scopes and the records gauge are package
// idemsql/sqlstore's, which every SQL store shares, over this driver's records
// statements (sql_records.go, checked by drivertest.Records).
//
// Store implements idem.Inspector and passes idemtest.InspectorSuite. Inspect and
// List read on the store's database, outside the writer; a List page is one range of
// the primary key (scope, id), ids in ascending byte order, and its cursor the
// base64url of the page's last id. Evict is one DELETE … RETURNING, so a concurrent
// Complete lands wholly before or after it; tokens come from the idem_meta floor, so
// an evicted holder stays fenced. Scopes (idem.ScopeLister) walks the primary key
// one seek per scope (a recursive CTE), never the records.
//
// # Schema
//
// Open and New create or migrate the tables idem_records, idem_meta and
// idem_migrations (embedded, idempotent migrations, safe for concurrent opens); they
// leave PRAGMA user_version to the application that shares the file.
//
// # Tracing
//
// With a TracerProvider (Config.TracerProvider, else the global one once the
// application sets it), each Claim, ClaimTx, Complete(Tx) and Release(Tx) is a
// client span, idem.store.claim, idem.store.complete or idem.store.release, a
// child of the caller's span, with idem.scope, idem.key, db.system.name "sqlite",
// idem.tx on the Tx variants and, for a claim, idem.outcome (idem.token when
// acquired, idem.duplicate when the key was taken); ClaimBatch is one
// idem.store.claim_batch span. With no provider set, no span is started.
package idemsqlite
