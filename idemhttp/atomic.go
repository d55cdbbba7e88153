package idemhttp

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/internal/metrics"
	"github.com/idemhq/idem/internal/wait"
)

// AtomicMiddleware is Middleware for handlers whose effects live in the SQL database
// of store: each request runs in one transaction of db that holds the claim of its
// key, the handler's writes (the handler gets the transaction from TxFrom) and the
// stored response. A crash anywhere leaves either all of them or none: never an
// effect without its recorded response, nor a response replayed for effects that
// were rolled back.
//
// Per request: db.Begin, store.ClaimTx; on Acquired the handler runs with the
// transaction in its context and its response is held back; then
//
//   - a response to store: CompleteTx and Commit, and only then is it written to the
//     client, so a client never sees a response whose effects did not commit. A
//     failed commit is answered 503 (problem+json) and nothing is replayed.
//   - 429, or a 5xx with Config.StoreServerErrors false: Rollback; effects and claim
//     are undone, the response goes to the client, and a retry runs again.
//   - a panic: Rollback, and the panic goes on to net/http.
//   - a response body beyond Config.MaxBodyBytes (or headers beyond
//     MaxStoredHeaderBytes): it cannot be stored, and it must
//     not be sent for effects that are not recorded, so the transaction is rolled
//     back and the client gets a 500 problem; raise the limit for such handlers.
//
// A concurrent request with the same key does not get 409 here: its ClaimTx waits
// in the database for the first transaction (Postgres on the key's row lock,
// SQLite on the write lock taken at BEGIN), then replays the committed response, or
// claims the key itself after a rollback. Duplicates serialize instead of failing;
// 409 (or Config.Wait) applies only to a key claimed in progress outside a
// transaction, by Middleware on the same table.
//
// Config.Store is ignored: store is used. With database/sql, build db with
// idemsql.SQLDB on the store's own database (idemsqlite.Store.DB(), or the *sql.DB of
// idempg.NewSQL); with pgx, idempg.TxDB and idempg.New on one pool. Each request in
// flight holds one connection for its transaction.
func AtomicMiddleware[Tx any](db idemsql.TxDB[Tx], store idem.TxStore[Tx], cfg Config) (func(http.Handler) http.Handler, error) {
	if err := db.Validate(); err != nil {
		return nil, err
	}
	if store == nil {
		return nil, &idem.InputError{Field: "store", Reason: "is nil",
			Fix: "pass the TxStore of db's database: idemsqlite.Open, idempg.New or idempg.NewSQL"}
	}
	c, err := newMiddlewareCore(cfg, false)
	if err != nil {
		return nil, err
	}
	a := &atomicRunner[Tx]{c: c, db: db, store: store}
	c.run = a.run
	return c.wrap, nil
}

// TxFrom returns the transaction of the request whose context is ctx, in a handler
// behind AtomicMiddleware. Write the handler's effects through it: they commit with
// the stored response. Tx must be the middleware's transaction type (*sql.Tx,
// pgx.Tx); ok is false outside the atomic middleware.
func TxFrom[Tx any](ctx context.Context) (tx Tx, ok bool) {
	tx, ok = ctx.Value(txContextKey[Tx]{}).(Tx)
	return tx, ok
}

type txContextKey[Tx any] struct{}

type atomicRunner[Tx any] struct {
	c     *mwCore
	db    idemsql.TxDB[Tx]
	store idem.TxStore[Tx]
}

func (a *atomicRunner[Tx]) run(next http.Handler, w http.ResponseWriter, r *http.Request, q *mwRequest) metrics.HTTPOutcome {
	// Detached from the client for the reason given at execute, and because
	// database/sql rolls back a transaction when the context of its BeginTx ends.
	ctx := context.WithoutCancel(r.Context())
	k := q.claim.Key
	// The claim is held by the transaction, not by its lease: no other request
	// sees it before the commit, which completes it, and a crash rolls it back.
	// Nothing renews it either, so a lease of Config.Lease would make CompleteTx
	// refuse the response of a handler slower than that (idem.ErrLeaseLost), and
	// every retry would be rolled back the same way. Hold it as long as a response
	// is kept.
	q.claim.Lease = max(q.claim.Lease, q.claim.Retention)
	var deadline time.Time
	if a.c.cfg.Wait > 0 {
		deadline = time.Now().Add(a.c.cfg.Wait)
	}
	pause := wait.FirstPause
	for {
		tx, err := a.db.Begin(ctx)
		if err != nil {
			return a.c.storeFailed(w, r, "begin", k, err)
		}
		res, err := a.store.ClaimTx(ctx, tx, q.claim)
		if err == nil && res.Outcome == idem.Acquired {
			return a.execute(next, w, r, q, tx, res.Token)
		}
		a.rollback(r, k, tx) // the claim wrote nothing to keep
		if err != nil {
			return a.c.storeFailed(w, r, "claim", k, err)
		}
		if res.Outcome != idem.InProgress || !wait.SleepUntil(r.Context(), time.Duration(pause), deadline) {
			return a.c.answerDuplicate(w, r, k, res)
		}
		pause = pause.Next()
	}
}

func (a *atomicRunner[Tx]) execute(next http.Handler, w http.ResponseWriter, r *http.Request, q *mwRequest, tx Tx, token uint64) metrics.HTTPOutcome {
	c, k := a.c, q.claim.Key
	ctx := context.WithoutCancel(r.Context())
	rec := &q.rec
	rec.reset(w, c.limit, *c.cfg.StoreServerErrors, true)
	hr := q.handlerRequest(context.WithValue(ctx, txContextKey[Tx]{}, tx), r)
	q.snapshotHeader(w.Header())
	returned := false
	defer func() {
		if !returned {
			a.rollback(r, k, tx) // a panic: effects and claim are undone, the key is free
		}
	}()
	next.ServeHTTP(rec, hr)
	returned = true

	rec.finishHeader()
	var stored []byte
	ok := !rec.oversize
	if !rec.direct && ok {
		stored, ok = c.encode(q)
	}
	switch {
	case rec.direct: // not a result (429, or a 5xx not to store): already streamed
		a.rollback(r, k, tx)
		return metrics.HTTPExecuted
	case !ok:
		a.rollback(r, k, tx)
		c.notRecorded(w, q, http.StatusInternalServerError, 0, fmt.Sprintf(
			"idem: the response is larger than %d bytes, the most that can be stored for replay, so the request's effects were rolled back: raise Config.MaxBodyBytes or make the response smaller", c.limit))
		return metrics.HTTPError
	}
	fctx, cancel := context.WithTimeout(ctx, finishTimeout)
	defer cancel()
	if err := a.store.CompleteTx(fctx, tx, k, token, stored); err != nil {
		a.rollback(r, k, tx)
		return a.commitFailed(w, r, q, "complete", k, err)
	}
	if err := a.db.Commit(fctx, tx); err != nil {
		return a.commitFailed(w, r, q, "commit", k, err)
	}
	rec.writeHeld()
	return metrics.HTTPExecuted
}

func (a *atomicRunner[Tx]) commitFailed(w http.ResponseWriter, r *http.Request, q *mwRequest, op string, k idem.Key, err error) metrics.HTTPOutcome {
	a.c.cfg.Logger.WarnContext(r.Context(), "idem: the transaction of an idempotent request did not commit; answered 503",
		"op", op, "key", k.String(), "err", err)
	a.c.notRecorded(w, q, http.StatusServiceUnavailable, storeRetryAfter,
		"idem: the request's effects and response could not be committed, so neither was kept: retry with the same Idempotency-Key after Retry-After seconds")
	return metrics.HTTPError
}

func (a *atomicRunner[Tx]) rollback(r *http.Request, k idem.Key, tx Tx) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), finishTimeout)
	defer cancel()
	if err := a.db.Rollback(ctx, tx); err != nil {
		// The database rolls back a transaction whose connection is gone.
		a.c.cfg.Logger.DebugContext(r.Context(), "idem: rollback failed", "key", k.String(), "err", err)
	}
}

// notRecorded replaces a held response, never sent, by a problem: the handler's
// representation headers describe a body the client will not get.
func (c *mwCore) notRecorded(w http.ResponseWriter, q *mwRequest, status int, retryAfter time.Duration, detail string) {
	h := q.rec.Header()
	c.storedNames(q, h)
	for _, name := range q.names {
		delete(h, name)
	}
	for _, name := range []string{"Content-Encoding", "Content-Range", "Set-Cookie", "Trailer"} {
		delete(h, name)
	}
	writeProblem(w, status, ProblemNotRecorded, "Response not recorded", detail, retryAfter)
}
