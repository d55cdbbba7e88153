package idempg_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idempg"
	"github.com/idemhq/idem/internal/testsvc"
	"github.com/idemhq/idem/outbox"
)

var _ outbox.Notifier = (*idempg.Notifier)(nil)

// notifierBundle is a Notifier on a channel of its own and a pool to notify from.
type notifierBundle struct {
	n       *idempg.Notifier
	pool    *pgxpool.Pool
	channel string
}

func setupNotifier(t *testing.T) *notifierBundle {
	t.Helper()
	pool := testsvc.PostgresPool(t)
	channel := testsvc.UniqueName("idem_test_chan_")
	n := idempg.NewNotifier(pool, channel)
	t.Cleanup(n.Close)
	return &notifierBundle{n: n, pool: pool, channel: channel}
}

func (b *notifierBundle) notify(t *testing.T) {
	t.Helper()
	if _, err := b.pool.Exec(ctxFor(t), "SELECT pg_notify($1, '')", b.channel); err != nil {
		t.Fatalf("pg_notify: %v", err)
	}
}

// waitAsync runs Wait in a goroutine and returns its result channel.
func (b *notifierBundle) waitAsync(ctx context.Context) <-chan error {
	done := make(chan error, 1)
	go func() { done <- b.n.Wait(ctx) }()
	return done
}

func within(t *testing.T, done <-chan error, d time.Duration, what string) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(d):
		t.Fatalf("%s: Wait did not return within %v", what, d)
		return nil
	}
}

func TestNotifierWakesOnNotify(t *testing.T) {
	t.Parallel()
	b := setupNotifier(t)
	if err := b.n.Listen(ctxFor(t)); err != nil {
		t.Fatalf("Listen: %v", err)
	}
	done := b.waitAsync(ctxFor(t))
	select {
	case err := <-done:
		t.Fatalf("Wait returned %v before any NOTIFY", err)
	case <-time.After(100 * time.Millisecond):
	}
	b.notify(t)
	if err := within(t, done, 10*time.Second, "after NOTIFY"); err != nil {
		t.Fatalf("Wait: %v", err)
	}
}

// A NOTIFY committed while nobody waits is returned by the next Wait; a burst is
// coalesced rather than lost.
func TestNotifierKeepsNotificationsBetweenWaits(t *testing.T) {
	t.Parallel()
	b := setupNotifier(t)
	if err := b.n.Listen(ctxFor(t)); err != nil {
		t.Fatalf("Listen: %v", err)
	}
	for range 3 {
		b.notify(t)
	}
	ctx, cancel := context.WithTimeout(ctxFor(t), 10*time.Second)
	defer cancel()
	if err := b.n.Wait(ctx); err != nil {
		t.Fatalf("Wait after an unattended NOTIFY: %v", err)
	}
	b.notify(t)
	if err := b.n.Wait(ctx); err != nil {
		t.Fatalf("second Wait: %v", err)
	}
}

func TestNotifierCancelReturnsPromptly(t *testing.T) {
	t.Parallel()
	b := setupNotifier(t)
	if err := b.n.Listen(ctxFor(t)); err != nil {
		t.Fatalf("Listen: %v", err)
	}
	ctx, cancel := context.WithCancel(ctxFor(t))
	done := b.waitAsync(ctx)
	time.Sleep(100 * time.Millisecond)
	cancel()
	if err := within(t, done, 3*time.Second, "after cancel"); !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait after cancel = %v, want context.Canceled", err)
	}
	// The connection survives a cancelled wait and still listens.
	b.notify(t)
	if err := within(t, b.waitAsync(ctxFor(t)), 10*time.Second, "after a cancelled Wait"); err != nil {
		t.Fatalf("Wait: %v", err)
	}
}

func TestNotifierReconnectsAfterBackendDies(t *testing.T) {
	t.Parallel()
	b := setupNotifier(t)
	ctx := ctxFor(t)
	if err := b.n.Listen(ctx); err != nil {
		t.Fatalf("Listen: %v", err)
	}
	done := b.waitAsync(ctx)
	var killed int
	err := b.pool.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE query = 'LISTEN "' || $1 || '"'`, b.channel).Scan(&killed)
	if err != nil || killed != 1 {
		t.Fatalf("terminate the listening backend: killed %d, err %v", killed, err)
	}
	err = within(t, done, 10*time.Second, "after pg_terminate_backend")
	var be *idem.BackendError
	if !errors.As(err, &be) || !idem.IsRetryable(err) {
		t.Fatalf("Wait on a terminated backend = %v, want a retryable *idem.BackendError", err)
	}
	// The next Wait reconnects and listens again; a NOTIFY sent before its LISTEN
	// is lost, so keep notifying until it returns.
	done = b.waitAsync(ctx)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("Wait after reconnecting: %v", err)
			}
			return
		case <-tick.C:
			b.notify(t)
		case <-deadline:
			t.Fatal("Wait did not reconnect and receive within 10s")
		}
	}
}

func TestNotifierClose(t *testing.T) {
	t.Parallel()
	b := setupNotifier(t)
	done := b.waitAsync(ctxFor(t))
	time.Sleep(100 * time.Millisecond)
	b.n.Close()
	if err := within(t, done, 3*time.Second, "after Close"); !errors.Is(err, idem.ErrClosed) {
		t.Fatalf("Wait during Close = %v, want idem.ErrClosed", err)
	}
	if err := b.n.Wait(ctxFor(t)); !errors.Is(err, idem.ErrClosed) {
		t.Fatalf("Wait after Close = %v, want idem.ErrClosed", err)
	}
}

func TestNotifierRejectsBadChannel(t *testing.T) {
	t.Parallel()
	for _, ch := range []string{"Idem", "idem-outbox", "x; DROP TABLE t", "a234567890123456789012345678901234567890123456789012345678901234"} {
		err := idempg.NewNotifier(&pgxpool.Pool{}, ch).Wait(context.Background())
		if !errors.Is(err, idem.ErrInvalid) {
			t.Errorf("channel %q: Wait = %v, want an *idem.InputError", ch, err)
		}
	}
	if got := idempg.NewNotifier(&pgxpool.Pool{}, "").Channel(); got != idempg.DefaultChannel {
		t.Errorf("default channel = %q, want %q", got, idempg.DefaultChannel)
	}
}

// Checking a silent connection neither wakes Wait nor breaks the listening.
func TestNotifierSilenceIsNotANotification(t *testing.T) {
	t.Parallel()
	b := setupNotifier(t)
	idempg.SetNotifierCheck(b.n, 20*time.Millisecond)
	if err := b.n.Listen(ctxFor(t)); err != nil {
		t.Fatalf("Listen: %v", err)
	}
	ctx, cancel := context.WithTimeout(ctxFor(t), 300*time.Millisecond)
	defer cancel()
	if err := b.n.Wait(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait on a silent channel = %v, want context.DeadlineExceeded", err)
	}
	b.notify(t)
	if err := within(t, b.waitAsync(ctxFor(t)), 10*time.Second, "after silence"); err != nil {
		t.Fatalf("Wait: %v", err)
	}
}
