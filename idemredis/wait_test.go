package idemredis_test

import (
	"errors"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemredis"
)

// On a Redis without replicas (the test server), WaitReplicas 1 can never be met:
// every waited call fails with a retryable error wrapping ErrNotReplicated, while
// Release and reads, which do not wait, work. The write itself happened: the
// claim holds the key.
func TestWaitWithoutReplicasFails(t *testing.T) {
	t.Parallel()
	b := setup(t, idemredis.Config{WaitReplicas: 1, WaitTimeout: 10 * time.Millisecond})
	ctx := ctxFor(t)
	k := idem.Key{Scope: "w", ID: "k"}
	_, err := b.store.Claim(ctx, idem.Claim{Key: k})
	if !errors.Is(err, idemredis.ErrNotReplicated) || !idem.IsRetryable(err) {
		t.Fatalf("Claim = %v, want a retryable error wrapping ErrNotReplicated", err)
	}
	rec, err := b.store.Inspect(ctx, k)
	if err != nil || rec.State != idem.StateInProgress {
		t.Fatalf("after the refused claim: %+v, %v; want the key held", rec, err)
	}
	if _, err := b.store.ClaimBatch(ctx, []idem.Claim{{Key: idem.Key{Scope: "w", ID: "b1"}}, {Key: idem.Key{Scope: "w", ID: "b2"}}}); !errors.Is(err, idemredis.ErrNotReplicated) {
		t.Fatalf("ClaimBatch = %v, want ErrNotReplicated", err)
	}
	if err := b.store.Complete(ctx, k, rec.Token, nil); !errors.Is(err, idemredis.ErrNotReplicated) {
		t.Fatalf("Complete = %v, want ErrNotReplicated", err)
	}
	// A token the record does not hold writes nothing: lease lost, not a WAIT error.
	if err := b.store.Complete(ctx, k, rec.Token+1, nil); !errors.Is(err, idem.ErrLeaseLost) {
		t.Fatalf("Complete with a wrong token = %v, want ErrLeaseLost", err)
	}
}
