// Package idempg is the PostgreSQL backend of idem: an idem.Store whose claims and
// completions can join the application's own transaction, so the record of an
// effect commits or rolls back with the effect.
//
// Store works on a pgx pool and implements idem.Store, idem.TxStore[pgx.Tx],
// idem.Sweeper, idem.BatchClaimer and idem.Renewer. SQLStore does the same for
// database/sql (idem.TxStore[*sql.Tx]), without BatchClaimer. Both run the same statements and pass idemtest's
// StoreSuite and TxStoreSuite.
//
// # Table
//
// New creates the table through package migrate (the statements are in
// migrate/sql/postgres/records/, applied under an advisory lock and recorded in
// idem_migrations), or with Config.SkipMigrate only checks it is up to date:
//
//	CREATE TABLE idem_records (
//	    scope       text        NOT NULL,
//	    id          text        NOT NULL,
//	    state       smallint    NOT NULL,  -- 1 in progress, 2 completed
//	    fingerprint bytea       NOT NULL DEFAULT '',
//	    token       bigint      NOT NULL,  -- from idem_records_token_seq
//	    result      bytea,                 -- NULL while in progress
//	    retention   interval    NOT NULL,
//	    created_at  timestamptz NOT NULL,
//	    expires_at  timestamptz NOT NULL,  -- lease end, then retention end
//	    PRIMARY KEY (scope, id)
//	);
//	CREATE INDEX idem_records_expires_at_idx ON idem_records (expires_at);
//
// A fresh claim is one statement and one round trip: a function (migration
// records/002) inserts the row with INSERT ... ON CONFLICT DO NOTHING and then draws
// its token. A key that exists is read by primary key in a second round trip, and an
// expired one taken over by an UPDATE.
//
// # Clock and tokens
//
// Leases and retention run on the database's clock (clock_timestamp()), never the
// application's, so servers with skewed clocks agree on when a lease ends.
//
// Fencing tokens come from the sequence idem_records_token_seq, and a token is drawn
// only once its claim holds the key: a fresh claim inserts its row first and then
// sets the token (the function idem_records_claim), a takeover draws it in the UPDATE
// that holds the row lock. Every incarnation of a key therefore gets a token above
// any the key had before, across takeovers, releases, expiry, sweeps and rolled-back
// transactions, whatever the claims' interleaving (Claim, ClaimTx and ClaimBatch
// alike), and a late Complete, Release or Renew of an earlier holder gets
// idem.ErrLeaseLost. Tokens are not dense; gaps are normal. (RecordTx's rows draw
// theirs before the insert, as nothing ever hands them out to a holder.)
//
// # Transactions
//
// ClaimTx, CompleteTx and ReleaseTx run on the caller's transaction. The claim, the
// business write and the completion then commit together; a concurrent claimant of
// the same key waits for the transaction and gets Replayed after a commit, Acquired
// after a rollback:
//
//	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
//		res, err := store.ClaimTx(ctx, tx, idem.Claim{Key: key})
//		if err != nil || res.Outcome != idem.Acquired {
//			return err // a duplicate: nothing to do (Replayed carries the result)
//		}
//		if _, err := tx.Exec(ctx, "INSERT INTO orders (id) VALUES ($1)", key.ID); err != nil {
//			return err
//		}
//		return store.CompleteTx(ctx, tx, key, res.Token, []byte("created"))
//	})
//
// Use READ COMMITTED, Postgres's default. Under REPEATABLE READ or SERIALIZABLE a
// claim racing another transaction on the same key fails with a serialization error
// (an *idem.BackendError); retry the transaction.
//
// # Renewing a lease
//
// Renew (idem.Renewer) moves a live holder's lease end to the given lease from now,
// on the database's clock, in one statement. It works on committed claims: a claim
// inside an open ClaimTx transaction is invisible to it (ErrLeaseLost), and needs no
// renewal, since concurrent claimants wait for that transaction.
//
// # Sweeping
//
// Expired rows are treated as absent but stay until swept. Run a sweeper in one or
// more processes (concurrent sweeps skip each other's rows):
//
//	go storekit.RunSweeper(ctx, store, time.Minute, logger)
//
// Each Sweep deletes Config.SweepBatch rows per statement until none are left.
//
// # Inspection
//
// The inspection, the list of scopes and the records gauge are package
// idemsql/sqlstore's, which every SQL store shares, over this driver's records
// statements (sql_records.go, checked by drivertest.Records).
//
// Store and SQLStore implement idem.Inspector and pass idemtest.InspectorSuite. A
// List page is one range scan of the primary key, WHERE scope = $1 AND id > $2
// ORDER BY id LIMIT $3, ids in the id column's collation order (a test EXPLAINs it
// on 200,000 rows); the cursor is the base64url of the page's last id. Evict is one
// DELETE … RETURNING, so a concurrent Complete lands wholly before or after it; the
// next claim draws from the token sequence, so an evicted holder stays fenced.
// Scopes (idem.ScopeLister) is a recursive-CTE skip scan of the primary key, one
// index descent per scope (a test EXPLAINs it on 200,000 rows over 1,000 scopes).
//
// # Outbox wake-ups
//
// TxDB adapts a pool to idem's transactional components (inbox, outbox). Its
// BeginPipelined transactions send BEGIN in one pgx pipeline with their first
// statement: the inbox's single-message transactions record the key that way, in
// the round trip that begins them. A Notifier
// (NewNotifier) listens for the NOTIFY idem_outbox that outbox.EnqueueTx sends, and
// wakes an outbox relay on commit instead of at its next poll.
//
// # Tracing
//
// With a TracerProvider (Config.TracerProvider, else the global one once the
// application sets it), each Claim, ClaimTx, Complete(Tx) and Release(Tx) is a
// client span, idem.store.claim, idem.store.complete or idem.store.release, a child
// of the caller's span, with idem.scope, idem.key, db.system.name "postgresql",
// idem.tx on the Tx variants and, for a claim, idem.outcome (idem.token when
// acquired, idem.duplicate when the key was taken); ClaimBatch is one
// idem.store.claim_batch span. With no provider set, no span is started.
package idempg
