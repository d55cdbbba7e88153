package testsvc

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// Notifier is what GatedNotifier wraps: an idempg.Notifier's Listen and Wait.
type Notifier interface {
	Listen(ctx context.Context) error
	Wait(ctx context.Context) error
}

// GatedNotifier is a Notifier whose listening again, after its first failed Wait,
// waits for the test (Release): what the test commits meanwhile falls in the gap
// where nobody listens. The outbox relay's and the queue Source's relisten tests
// use it alike.
type GatedNotifier struct {
	n      Notifier
	failed chan struct{} // closed at the first failed Wait
	gate   chan struct{} // closed by Release: listening again may go on
	once   sync.Once
	down   atomic.Bool
}

// NewGatedNotifier wraps n.
func NewGatedNotifier(n Notifier) *GatedNotifier {
	return &GatedNotifier{n: n, failed: make(chan struct{}), gate: make(chan struct{})}
}

// Failed is closed at the first Wait that fails while its ctx is live.
func (g *GatedNotifier) Failed() <-chan struct{} { return g.failed }

// Release lets the notifier listen again.
func (g *GatedNotifier) Release() { close(g.gate) }

func (g *GatedNotifier) hold(ctx context.Context) {
	if g.down.Load() {
		select {
		case <-g.gate:
		case <-ctx.Done():
		}
	}
}

func (g *GatedNotifier) Listen(ctx context.Context) error {
	g.hold(ctx)
	return g.n.Listen(ctx)
}

func (g *GatedNotifier) Wait(ctx context.Context) error {
	g.hold(ctx)
	err := g.n.Wait(ctx)
	if err != nil && ctx.Err() == nil {
		g.down.Store(true)
		g.once.Do(func() { close(g.failed) })
	}
	return err
}

// KillListener terminates the PostgreSQL backend that listens on channel, once it
// listens.
func KillListener(t testing.TB, ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, channel string) {
	t.Helper()
	Eventually(t, 60*time.Second, "the LISTEN connection terminated", func() bool {
		var killed int
		err := q.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
			WHERE query = 'LISTEN "' || $1 || '"'`, channel).Scan(&killed)
		return err == nil && killed == 1
	})
}
