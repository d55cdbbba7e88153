package idemgrpc

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/internal/metrics"
	"github.com/idemhq/idem/internal/otelx"
	"github.com/idemhq/idem/internal/wait"
)

// AtomicUnaryServerInterceptor is UnaryServerInterceptor for handlers whose
// effects live in the SQL database of store: each call runs in one transaction of
// db that holds the claim of its key, the handler's writes (the handler gets the
// transaction from TxFrom) and the stored result. A crash anywhere leaves all of
// them or none: never an effect without its recorded result, nor a result replayed
// for effects that were rolled back.
//
// Per call: db.Begin, store.ClaimTx; on Acquired the handler runs with the
// transaction in its context; then
//
//   - a result to store: CompleteTx and Commit, and only then does the result
//     go to the caller. A failed commit is answered Unavailable (reason
//     IDEMPOTENCY_NOT_COMMITTED) and nothing is replayed: the retry runs again.
//   - a transient code (Unavailable, ResourceExhausted, Aborted, Canceled,
//     DeadlineExceeded), or a server error with Config.StoreServerErrors false:
//     Rollback, and the caller gets the handler's status; a retry runs again.
//   - a panic: Rollback, and the panic goes on.
//   - a result over Config.MaxResponseBytes (or not a protobuf message): it
//     cannot be stored, and must not be sent for effects that are not recorded,
//     so the transaction is rolled back and the caller gets Internal (reason
//     IDEMPOTENCY_RESPONSE_NOT_STORED).
//
// A concurrent call with the same key waits in the database for the first
// transaction (a row lock in Postgres and MySQL, the write lock in SQLite), then
// replays its committed result, or claims the key itself after a rollback:
// duplicates and hedged copies serialize instead of failing.
//
// Config.Store is ignored. With database/sql, build db with idemsql.SQLDB on the
// store's own database; with pgx, idempg.TxDB and idempg.New on one pool. Each call
// in flight holds one connection for its transaction.
func AtomicUnaryServerInterceptor[Tx any](db idemsql.TxDB[Tx], store idem.TxStore[Tx], cfg Config) (grpc.UnaryServerInterceptor, error) {
	if err := db.Validate(); err != nil {
		return nil, err
	}
	if store == nil {
		return nil, &idem.InputError{Field: "store", Reason: "is nil",
			Fix: "pass the TxStore of db's database: idemsqlite.Open, idempg.New, idempg.NewSQL or idemmysql.Open"}
	}
	s, err := newServer(cfg, false)
	if err != nil {
		return nil, err
	}
	a := &atomicRunner[Tx]{s: s, db: db, store: store}
	s.run = a.run
	return s.intercept, nil
}

// TxFrom returns the transaction of the call whose context is ctx, in a handler
// behind AtomicUnaryServerInterceptor: write the handler's effects through it and
// they commit with the stored result. Tx must be the interceptor's transaction
// type (*sql.Tx, pgx.Tx); ok is false elsewhere.
func TxFrom[Tx any](ctx context.Context) (tx Tx, ok bool) {
	tx, ok = ctx.Value(txContextKey[Tx]{}).(Tx)
	return tx, ok
}

type txContextKey[Tx any] struct{}

type atomicRunner[Tx any] struct {
	s     *server
	db    idemsql.TxDB[Tx]
	store idem.TxStore[Tx]
}

func (a *atomicRunner[Tx]) run(ctx context.Context, req any, mi *methodInfo, handler grpc.UnaryHandler, c idem.Claim) (any, metrics.HTTPOutcome, error) {
	// Detached from the caller for the reason given at execute, and because
	// database/sql rolls back a transaction when the context of its BeginTx ends.
	dctx := context.WithoutCancel(ctx)
	// The claim is held by the transaction, not by its lease: no other call sees
	// it before the commit, which completes it, and a crash rolls it back. Nothing
	// renews it either, so a lease of Config.Lease would make CompleteTx refuse
	// the result of a handler slower than that (idem.ErrLeaseLost) on every
	// attempt. Hold it as long as a result is kept.
	c.Lease = max(c.Lease, c.Retention)
	var deadline time.Time
	if a.s.cfg.Wait > 0 {
		deadline = time.Now().Add(a.s.cfg.Wait)
	}
	pause := wait.FirstPause
	for {
		tx, err := a.db.Begin(dctx)
		if err != nil {
			return nil, metrics.HTTPError, a.s.storeFailed(ctx, "begin", c.Key, err)
		}
		res, err := a.store.ClaimTx(dctx, tx, c)
		if err == nil {
			otelx.SetOutcome(trace.SpanFromContext(ctx), res.Outcome, res.Token)
		}
		if err == nil && res.Outcome == idem.Acquired {
			return a.execute(ctx, req, mi, handler, c.Key, tx, res.Token)
		}
		a.rollback(ctx, c.Key, tx) // the claim wrote nothing to keep
		if err != nil {
			return nil, metrics.HTTPError, a.s.storeFailed(ctx, "claim", c.Key, err)
		}
		if res.Outcome != idem.InProgress || !wait.SleepUntil(ctx, time.Duration(pause), deadline) {
			return a.s.answerDuplicate(ctx, mi, c.Key, res)
		}
		pause = pause.Next()
	}
}

func (a *atomicRunner[Tx]) execute(ctx context.Context, req any, mi *methodInfo, handler grpc.UnaryHandler, k idem.Key, tx Tx, token uint64) (any, metrics.HTTPOutcome, error) {
	s := a.s
	hctx, held := s.handlerContext(ctx, k)
	hctx = context.WithValue(hctx, txContextKey[Tx]{}, tx)
	returned := false
	defer func() {
		if !returned {
			a.rollback(ctx, k, tx) // a panic: effects and claim are undone, the key is free
		}
	}()
	resp, herr := handler(hctx, req)
	returned = true

	b, keep, whole := s.result(mi, resp, herr, held)
	switch {
	case !keep:
		a.rollback(ctx, k, tx)
		held.flush()
		return resp, metrics.HTTPExecuted, herr
	case !whole:
		a.rollback(ctx, k, tx)
		return nil, metrics.HTTPError, statusf(codes.Internal, ReasonNotStored, nil,
			"idem: the result of %s is larger than %d bytes (Config.MaxResponseBytes), or not a protobuf message, so it cannot be stored for replay and the call's effects were rolled back: raise Config.MaxResponseBytes or make the response smaller", mi.name, s.cfg.MaxResponseBytes)
	}
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), finishTimeout)
	defer cancel()
	if err := a.store.CompleteTx(fctx, tx, k, token, b); err != nil {
		a.rollback(ctx, k, tx)
		return nil, metrics.HTTPError, a.commitFailed(ctx, "complete", k, err)
	}
	if err := a.db.Commit(fctx, tx); err != nil {
		return nil, metrics.HTTPError, a.commitFailed(ctx, "commit", k, err)
	}
	held.flush()
	return resp, metrics.HTTPExecuted, herr
}

func (a *atomicRunner[Tx]) commitFailed(ctx context.Context, op string, k idem.Key, err error) error {
	a.s.cfg.Logger.WarnContext(ctx, "idem: the transaction of an idempotent call did not commit; answered Unavailable",
		"op", op, "key", k.String(), "err", err)
	pushback(ctx, storeRetryAfter)
	return statusf(codes.Unavailable, ReasonNotCommitted, ptr(storeRetryAfter),
		"idem: the call's effects and result could not be committed, so neither was kept: retry with the same key after the pushback")
}

func (a *atomicRunner[Tx]) rollback(ctx context.Context, k idem.Key, tx Tx) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), finishTimeout)
	defer cancel()
	if err := a.db.Rollback(rctx, tx); err != nil {
		// The database rolls back a transaction whose connection is gone.
		a.s.cfg.Logger.DebugContext(ctx, "idem: rollback failed", "key", k.String(), "err", err)
	}
}
