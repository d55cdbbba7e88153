package idemnats

import (
	"context"
	"errors"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/idemhq/idem/chaos"
	"github.com/idemhq/idem/internal/testsvc"
	"github.com/nats-io/nats.go"
)

// A request in flight when its connection is lost ends with ErrDisconnected
// (which the Sink and the acks retry); the caller's own cancellation stays its
// own; a request made after the loss is not ended by it; and the watch stops
// with its connection. The request here waits for its context only, as one whose
// reply went down with the connection does.
func TestConnWatch(t *testing.T) {
	raw := os.Getenv("IDEM_TEST_NATS_URL")
	if raw == "" {
		raw = "nats://127.0.0.1:4222"
	}
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	testsvc.Reach(t, "nats", u.Host)
	proxy, err := chaos.NewProxy("nats", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proxy.Close)
	nc, err := nats.Connect("nats://"+proxy.Addr(), nats.MaxReconnects(-1), nats.ReconnectWait(10*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	w := watchConn(nc)
	if again := watchConn(nc); again != w {
		t.Fatal("a second watchConn of one connection made a second watch")
	}
	// wait starts a request that waits for its context only; it reports on
	// started once it waits.
	wait := func(ctx context.Context) (started chan struct{}, done chan error) {
		started, done = make(chan struct{}), make(chan error, 1)
		go func() {
			done <- w.request(ctx, time.Hour, func(ctx context.Context) error {
				close(started)
				<-ctx.Done()
				return ctx.Err()
			})
		}()
		return started, done
	}

	started, done := wait(context.Background())
	<-started
	if err := proxy.Cut(0); err != nil {
		t.Fatal(err)
	}
	err = <-done
	if !errors.Is(err, nats.ErrDisconnected) {
		t.Fatalf("request cut off by a lost connection = %v, want nats.ErrDisconnected", err)
	}
	if !transient(context.Background(), err) {
		t.Errorf("the error of a request cut off (%v) is not transient: it would not be retried", err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	started, done = wait(ctx)
	<-started
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) || errors.Is(err, nats.ErrDisconnected) {
		t.Fatalf("request cancelled by its caller = %v, want context.Canceled", err)
	}

	// Neither does a loss before a request starts end it, nor is another failure
	// renamed.
	if err := w.request(context.Background(), time.Hour, func(ctx context.Context) error { return ctx.Err() }); err != nil {
		t.Fatalf("request after the loss = %v, want nil", err)
	}
	if err := w.request(context.Background(), time.Hour, func(context.Context) error { return nats.ErrConnectionClosed }); !errors.Is(err, nats.ErrConnectionClosed) {
		t.Fatalf("request failing on its own = %v, want its error", err)
	}

	nc.Close()
	if err := <-func() chan error {
		_, done := wait(context.Background())
		return done
	}(); !errors.Is(err, nats.ErrDisconnected) {
		t.Fatalf("request on a closed connection = %v, want it ended as disconnected", err)
	}
	for {
		if _, ok := watches.Load(nc); !ok {
			break
		}
		time.Sleep(time.Millisecond) // the watch's goroutine has its CLOSED event in hand
	}
}
