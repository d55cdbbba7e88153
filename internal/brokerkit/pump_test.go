package brokerkit

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/idemhq/idem"
)

// TestPump: Receive waits for a pull, hands out what next takes, reports a failed
// pull once, and returns idem.ErrClosed after Close, which gives the buffer back.
func TestPump(t *testing.T) {
	var p Pump[int]
	ctx := context.Background()
	next := func() ([]int, error) {
		if len(p.Buf) > 0 {
			return p.Take(min(2, len(p.Buf))), nil
		}
		if err := p.Failed(); err != nil {
			return nil, err
		}
		if !p.Pulling {
			p.Pulling = true
			go func() { // a pull that brings three messages
				p.Mu.Lock()
				defer p.Mu.Unlock()
				p.Pulling = false
				p.Buf = append(p.Buf, 1, 2, 3)
				p.Broadcast()
			}()
		}
		return nil, nil
	}
	if got, err := p.Receive(ctx, next); err != nil || len(got) != 2 || got[0] != 1 {
		t.Fatalf("first Receive = %v, %v; want [1 2]", got, err)
	}
	if got, err := p.Receive(ctx, next); err != nil || len(got) != 1 || got[0] != 3 {
		t.Fatalf("second Receive = %v, %v; want [3]", got, err)
	}
	failed := errors.New("pull failed")
	p.Mu.Lock()
	p.Err, p.Pulling = failed, true // no new pull: the failure is what Receive sees
	p.Mu.Unlock()
	if _, err := p.Receive(ctx, next); !errors.Is(err, failed) {
		t.Fatalf("Receive after a failed pull = %v, want it", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := p.Receive(cctx, next); !errors.Is(err, context.Canceled) {
		t.Fatalf("Receive with an ended ctx = %v", err)
	}
	p.Mu.Lock()
	p.Pulling = true // a pull that brings nothing yet: Receive waits
	p.Mu.Unlock()
	var wg sync.WaitGroup
	wg.Go(func() {
		if _, err := p.Receive(ctx, next); !errors.Is(err, idem.ErrClosed) {
			t.Errorf("Receive blocked at Close = %v, want idem.ErrClosed", err)
		}
	})
	p.Close(nil)
	wg.Wait()

	var q Pump[int]
	q.Buf = []int{7}
	var detached []int
	buf, first := q.Close(func(buf []int) { detached = buf })
	if !first || len(buf) != 1 || buf[0] != 7 || len(detached) != 1 {
		t.Fatalf("Close = %v, %v (detach saw %v); want the buffer [7], first", buf, first, detached)
	}
	if buf, first := q.Close(nil); first || buf != nil {
		t.Fatalf("second Close = %v, %v; want nothing", buf, first)
	}
}

// TestSetup: a nil client is refused naming its field; otherwise the config's
// defaults apply.
func TestSetup(t *testing.T) {
	withDefaults := func(n int) (int, error) { return max(n, 5), nil }
	var in *idem.InputError
	if _, err := Setup(true, "js", "pass one", 0, withDefaults); !errors.As(err, &in) || in.Field != "js" {
		t.Fatalf("Setup(nil client) = %v", err)
	}
	if n, err := Setup(false, "js", "pass one", 1, withDefaults); err != nil || n != 5 {
		t.Fatalf("Setup = %d, %v; want 5", n, err)
	}
	refused := errors.New("refused")
	if _, err := Configure(refused, 1, withDefaults); err != refused {
		t.Fatalf("Configure(refused) = %v", err)
	}
}

// TestClaim: an ended ctx comes first; a second claim is ErrSettled.
func TestClaim(t *testing.T) {
	var o Once
	cctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := o.Claim(cctx, "idemx", "ack", "p"); !errors.Is(err, context.Canceled) || o.Taken() {
		t.Fatalf("Claim with an ended ctx = %v (taken %v)", err, o.Taken())
	}
	if err := o.Claim(context.Background(), "idemx", "ack", "p"); err != nil {
		t.Fatal(err)
	}
	if err := o.Claim(context.Background(), "idemx", "nak", "p"); !errors.Is(err, idem.ErrSettled) {
		t.Fatalf("second Claim = %v, want idem.ErrSettled", err)
	}
}
