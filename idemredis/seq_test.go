package idemredis_test

import (
	"context"
	"errors"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemredis"
	"github.com/idemhq/idem/idemseq"
	"github.com/idemhq/idem/idemtest"
	"github.com/idemhq/idem/internal/testsvc"
)

func newSeqTracker(t *testing.T, cfg idemseq.Config) (*idemredis.SeqTracker, bundle) {
	t.Helper()
	b := setup(t, idemredis.Config{})
	tr, err := idemredis.NewSeqTracker(b.client, cfg, b.prefix)
	if err != nil {
		t.Fatal(err)
	}
	return tr, b
}

func TestSeqTrackerSuite(t *testing.T) {
	t.Parallel()
	idemtest.SeqSuite(t, idemtest.SeqHarness{New: func(t *testing.T, cfg idemseq.Config) idemseq.Tracker {
		tr, _ := newSeqTracker(t, cfg)
		return tr
	}})
}

// TestSeqTrackerResize: a window saved under one size is re-laid into another without
// forgetting the numbers both cover, as the SQL tracker does.
func TestSeqTrackerResize(t *testing.T) {
	t.Parallel()
	ctx := ctxFor(t)
	small, b := newSeqTracker(t, idemseq.Config{Window: 64})
	for _, seq := range []uint64{1000, 990, 950} {
		if v, err := small.Check(ctx, "p", 0, seq); err != nil || v != idemseq.Accepted {
			t.Fatalf("Check(%d) = %v, %v", seq, v, err)
		}
	}
	big, err := idemredis.NewSeqTracker(b.client, idemseq.Config{Window: 1024}, b.prefix)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		seq  uint64
		want idemseq.Verdict
	}{{990, idemseq.Duplicate}, {950, idemseq.Duplicate}, {900, idemseq.Accepted}, {1000, idemseq.Duplicate}} {
		if v, err := big.Check(ctx, "p", 0, tc.seq); err != nil || v != tc.want {
			t.Errorf("after growing the window, Check(%d) = %v, %v; want %v", tc.seq, v, err, tc.want)
		}
	}
	if n, err := b.client.StrLen(ctx, big.Key("p")).Result(); err != nil || n > 24+1024/8 {
		t.Errorf("state of one producer = %d bytes (%v), want at most %d", n, err, 24+1024/8)
	}
	if v, err := small.Check(ctx, "p", 0, 990); err != nil || v != idemseq.Duplicate {
		t.Errorf("after shrinking back, Check(990) = %v, %v; want duplicate", v, err)
	}
}

func TestSeqTrackerUnreachable(t *testing.T) {
	t.Parallel()
	client := redis.NewClient(&redis.Options{Addr: testsvc.ClosedAddr(t), MaxRetries: -1})
	defer client.Close()
	tr, err := idemredis.NewSeqTracker(client, idemseq.Config{}, "")
	if err != nil {
		t.Fatal(err)
	}
	_, err = tr.Check(context.Background(), "p", 0, 1)
	var be *idem.BackendError
	if !errors.As(err, &be) || be.Op != "seq.check" || !idem.IsRetryable(err) {
		t.Fatalf("Check on a dead Redis = %v, want a retryable *idem.BackendError from seq.check", err)
	}
	if _, err := idemredis.NewSeqTracker(client, idemseq.Config{}, "bad{prefix}"); !errors.Is(err, idem.ErrInvalid) {
		t.Errorf("prefix with a hash tag: %v, want idem.ErrInvalid", err)
	}
}
