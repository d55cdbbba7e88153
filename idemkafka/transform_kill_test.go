package idemkafka_test

import (
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemhq/idem/idemkafka"
	"github.com/idemhq/idem/internal/testsvc"
	"github.com/twmb/franz-go/pkg/kgo"
)

// cutter is a dialer whose connections can all be cut at once, after which it
// refuses to dial: the network view of a process killed with SIGKILL, which sends
// no LeaveGroup and no EndTxn.
type cutter struct {
	mu    sync.Mutex
	dead  bool
	conns []net.Conn
}

func (c *cutter) dial(ctx context.Context, network, host string) (net.Conn, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dead {
		return nil, errors.New("cut: the process is dead")
	}
	conn, err := (&net.Dialer{}).DialContext(ctx, network, host)
	if err == nil {
		c.conns = append(c.conns, conn)
	}
	return conn, err
}

func (c *cutter) cut() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.dead = true
	for _, conn := range c.conns {
		_ = conn.Close()
	}
}

// TestTransformNetworkKill: instance "k" loses every connection between producing
// a batch's outputs and ending its transaction, three times, while instance "b"
// runs: the group drops it by session timeout, not by a leave, and its open
// transaction stays open until the restarted "k" fences it. A read_committed
// reader sees each input's output exactly once; a read_uncommitted one sees the
// killed transactions' outputs too.
func TestTransformNetworkKill(t *testing.T) {
	t.Parallel()
	e := newTxEnv(t)
	const perRound, rounds = 300, 3
	b := start(t, e.config("b", 2), e.upper, nil)
	all := []*running{b}
	kills := 0
	for round := range rounds {
		e.produce(t, round*perRound, (round+1)*perRound)
		c := &cutter{}
		cfg := e.config("k", 2)
		cfg.Options = append(cfg.Options, kgo.Dialer(c.dial), kgo.RetryTimeout(time.Second))
		var txns atomic.Int32
		k := start(t, cfg, e.upper, func(int) bool {
			if txns.Add(1) < 3 {
				return true
			}
			c.cut()
			return false
		})
		all = append(all, k)
		select {
		case err := <-k.done:
			close(k.done)
			if !errors.Is(err, idemkafka.ErrCrashed) {
				t.Fatalf("round %d: Run returned %v, want the crash", round, err)
			}
			kills++
		case <-time.After(time.Minute):
			t.Logf("round %d: instance k saw no third transaction", round)
			k.wait(t)
		}
	}
	if kills < 2 {
		t.Fatalf("only %d of %d instances were killed mid-transaction", kills, rounds)
	}
	n := rounds * perRound
	k := start(t, e.config("k", 2), e.upper, nil) // fences the last killed "k"
	all = append(all, k)
	// The output topic is the truth: an instance whose connections are cut while its
	// EndTxn is on the wire may have committed without learning it, so the
	// instances' own counts (Committed) can fall short of what the broker holds.
	testsvc.Eventually(t, 2*time.Minute, "every input's output committed", func() bool { return len(e.read(t, e.out, true)) >= n })
	for _, r := range []*running{k, b} {
		if err := r.wait(t); err != nil {
			t.Errorf("Run: %v", err)
		}
	}
	if got := committedSum(all...); got > int64(n) {
		t.Errorf("the instances report %d consumed records committed, more than the %d inputs", got, n)
	}
	testsvc.Eventually(t, time.Minute, "no transaction open", func() bool { return reachedLSO(t, e) })
	if u := total(e.read(t, e.out, false)); u <= n {
		t.Errorf("read_uncommitted sees %d outputs for %d inputs: the kills left no aborted output", u, n)
	}
	exactlyOnce(t, e.read(t, e.out, true), n)
}
