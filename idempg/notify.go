package idempg

import (
	"context"
	"fmt"
	"regexp"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemhq/idem"
)

// DefaultChannel is the channel outbox.EnqueueTx notifies on commit.
const DefaultChannel = "idem_outbox"

// notifyCheckEvery is how long Wait waits on a silent connection before it checks
// that the connection is still alive: a connection dropped without a FIN (a
// partition, a NAT timeout) would otherwise leave Wait blocked for good.
const notifyCheckEvery = 30 * time.Second

// Notifier waits for PostgreSQL notifications on one channel: it wakes an outbox
// relay (outbox.RelayConfig.Notifier) when a transaction that enqueued messages
// commits, so the relay publishes at once instead of at its next poll.
//
// A Notifier holds one dedicated connection, taken out of the pool (its hooks and
// settings apply, and it no longer counts against the pool's size), and runs LISTEN
// on it once. Notifications that arrive while nobody waits are kept on the connection
// and returned by the next Wait, so none is missed between two Waits; several may be
// coalesced into one return. Notifications sent while the connection is down are
// lost: after Wait returned an error, the caller must look for work itself (the
// relay polls) before it waits again.
//
// Wait and Listen are for one caller at a time (the relay calls Wait from one
// goroutine); Close may be called from any goroutine.
type Notifier struct {
	pool    *pgxpool.Pool
	channel string
	invalid error // a bad argument of NewNotifier, returned by every Wait
	refused error // set under mu once the pool is found behind a transaction pooler
	check   time.Duration

	closed context.Context // done once Close is called
	close  context.CancelFunc

	mu   sync.Mutex // held by Wait and Listen, and by Close to release conn
	conn *pgx.Conn  // nil until the first Wait, and after a connection error
}

// notifyPoolerError is what Listen and Wait return on a pool that reaches
// PostgreSQL through a pooler in transaction mode. It is not retryable: a relay or
// queue Source given such a Notifier logs it at start and polls.
var notifyPoolerError = &idem.InputError{Field: "idempg.NewNotifier pool",
	Reason: "reaches PostgreSQL through a pooler in transaction mode (such as PgBouncer pool_mode = transaction), " +
		"where LISTEN does not outlast its transaction and notifications never arrive",
	Fix: "give NewNotifier a pool on a direct connection to the server (the same database, not through the pooler); " +
		"without one, leave the Notifier out and the relay or Source polls"}

// channelRE is what a channel name may be: a lowercase identifier.
var channelRE = regexp.MustCompile(`^[a-z_][a-z0-9_]*$`)

// NewNotifier returns a Notifier listening on channel (DefaultChannel if empty) with
// a connection from pool. It connects on the first Listen or Wait. The channel must
// be a lowercase identifier (a-z, 0-9, _) of at most 63 bytes, so that NOTIFY channel
// and pg_notify('channel', …) both reach it; otherwise every Wait returns an
// *idem.InputError.
//
// The pool must reach the server directly or through a pooler in session mode: on
// one in transaction mode (PgBouncer's pool_mode = transaction) LISTEN does not
// outlast its transaction, and the first Listen or Wait returns an
// *idem.InputError that says so (a relay or queue Source then logs it and polls).
// The pool may differ from the one the outbox or queue uses, as long as it reaches
// the same database: a small pool on a direct DSN for notifications beside a pooled
// one for the work.
func NewNotifier(pool *pgxpool.Pool, channel string) *Notifier {
	if channel == "" {
		channel = DefaultChannel
	}
	n := &Notifier{pool: pool, channel: channel, check: notifyCheckEvery}
	n.closed, n.close = context.WithCancel(context.Background())
	switch {
	case pool == nil:
		n.invalid = &idem.InputError{Field: "pool", Reason: "is nil", Fix: "pass the pgxpool.Pool the outbox uses"}
	case !channelRE.MatchString(channel) || len(channel) > 63:
		n.invalid = &idem.InputError{Field: "channel", Reason: fmt.Sprintf("%q is not a lowercase identifier of at most 63 bytes", channel),
			Fix: `use a-z, 0-9 and _, starting with a letter or _ (or "" for "idem_outbox")`}
	}
	return n
}

// Channel returns the channel n listens on.
func (n *Notifier) Channel() string { return n.channel }

// Listen connects and runs LISTEN now unless n is already listening. Wait does it
// itself; call Listen first to be notified of every commit from this point on, such
// as before a relay's first round.
func (n *Notifier) Listen(ctx context.Context) error {
	return n.listening(ctx, func(context.Context) error { return nil })
}

// listening runs fn listening, with n.mu held and a ctx that Close cancels: the
// common start of Listen and Wait.
func (n *Notifier) listening(ctx context.Context, fn func(ctx context.Context) error) error {
	if n.invalid != nil {
		return n.invalid
	}
	ctx, stop := n.closable(ctx)
	defer stop()
	n.mu.Lock()
	defer n.mu.Unlock()
	if err := n.listen(ctx); err != nil {
		return err
	}
	return fn(ctx)
}

// pingTimeout bounds the check of a silent connection.
const pingTimeout = 5 * time.Second

// Wait returns nil when a notification arrived on the channel since the previous
// Wait returned (or since Listen), blocking until one does. It returns ctx's error
// when ctx ends; idem.ErrClosed after Close; and a retryable *idem.BackendError when
// the connection failed, after closing it: the next Wait connects and listens again.
func (n *Notifier) Wait(ctx context.Context) error { return n.listening(ctx, n.wait) }

// wait waits for a notification on the connection n.listen opened, checking it
// after each n.check of silence.
func (n *Notifier) wait(ctx context.Context) error {
	for {
		wait, cancel := context.WithTimeout(ctx, n.check)
		_, err := n.conn.WaitForNotification(wait)
		timedOut := wait.Err() != nil && ctx.Err() == nil
		cancel()
		switch {
		case err == nil:
			n.drain()
			return nil
		case timedOut && !n.conn.IsClosed():
			// Silence for a while: check the connection, then wait on. The check does
			// not take ctx: a caller giving up in the middle of it would leave the
			// query half done, pgx would close the connection, and with it the LISTEN,
			// losing the notifications sent before the next Wait.
			pctx, pcancel := context.WithTimeout(context.Background(), pingTimeout)
			err = n.conn.Ping(pctx)
			pcancel()
			if err == nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				continue
			}
		}
		return n.fail(ctx, err)
	}
}

// Close releases the connection and makes every later Wait return idem.ErrClosed.
// A Wait in progress returns. Close is idempotent.
func (n *Notifier) Close() {
	n.close()
	n.mu.Lock()
	defer n.mu.Unlock()
	n.drop()
}

// closable returns ctx, also cancelled when Close is called.
func (n *Notifier) closable(ctx context.Context) (context.Context, func()) {
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(n.closed, cancel)
	return ctx, func() { stop(); cancel() }
}

func (n *Notifier) isClosed() bool { return n.closed.Err() != nil }

// listen connects and runs LISTEN unless already done. It runs with n.mu held.
func (n *Notifier) listen(ctx context.Context) error {
	if n.isClosed() {
		return idem.ErrClosed
	}
	if n.refused != nil {
		return n.refused
	}
	if n.conn != nil {
		return nil
	}
	pc, err := n.pool.Acquire(ctx)
	if err != nil {
		return n.fail(ctx, err)
	}
	conn := pc.Hijack()
	// LISTEN through a transaction pooler is accepted and then lost with the server
	// session the pooler lends to the next client: refuse rather than wait for
	// notifications that cannot come.
	if pooled, err := transactionPooled(ctx, conn); pooled || err != nil {
		closeConn(conn)
		if pooled {
			n.refused = notifyPoolerError
			return n.refused
		}
		return n.fail(ctx, err)
	}
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{n.channel}.Sanitize()); err != nil {
		closeConn(conn) // not listening: never keep it
		return n.fail(ctx, err)
	}
	n.conn = conn
	return nil
}

// fail turns err into what Wait returns: ErrClosed, ctx's error, or a BackendError
// after dropping the connection. A cancelled wait leaves a healthy connection (pgx
// interrupts the read with a deadline), still listening.
func (n *Notifier) fail(ctx context.Context, err error) error {
	switch {
	case n.isClosed():
		n.drop()
		return idem.ErrClosed
	case ctx.Err() != nil:
		if n.conn != nil && n.conn.IsClosed() {
			n.conn = nil
		}
		return ctx.Err()
	}
	n.drop()
	return &idem.BackendError{Backend: backend, Op: "listen", Err: fmt.Errorf("channel %s: %w", n.channel, err)}
}

// drain takes the notifications pgx already buffered, so they are coalesced into
// the return that is under way rather than causing one wake each. Only the buffer is
// read: the context is done, so pgx does not touch the socket.
func (n *Notifier) drain() {
	done, cancel := context.WithCancel(context.Background())
	cancel()
	for {
		if _, err := n.conn.WaitForNotification(done); err != nil {
			return
		}
	}
}

// drop closes the connection, if any. It runs with n.mu held.
func (n *Notifier) drop() {
	if n.conn != nil {
		closeConn(n.conn)
		n.conn = nil
	}
}

func closeConn(c *pgx.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = c.Close(ctx)
}
