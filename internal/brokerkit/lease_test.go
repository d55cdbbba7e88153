package brokerkit

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestKeeper: a lease near its deadline is extended; one that would pass
// MaxExtension is let go; one whose extension is refused is let go with why.
func TestKeeper(t *testing.T) {
	refused := errors.New("refused")
	extended := make(chan string, 100)
	letGo := make(chan string, 100)
	kp := &Keeper[string]{Every: time.Millisecond, Margin: time.Hour, Lease: time.Minute, MaxExtension: time.Hour,
		Extend: func(_ context.Context, keys []string) map[string]error {
			failed := map[string]error{}
			for _, k := range keys {
				extended <- k
				if k == "bad" {
					failed[k] = refused
				}
			}
			return failed
		},
		LetGo: func(k string, err error) {
			if (k == "bad") != errors.Is(err, refused) {
				t.Errorf("LetGo(%s, %v)", k, err)
			}
			letGo <- k
		}}
	now := time.Now()
	kp.Add("slow", now, now)
	kp.Add("bad", now, now)
	kp.Add("stuck", now.Add(-time.Hour), now)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); kp.Run(ctx) }()
	gone := map[string]bool{}
	for len(gone) < 2 {
		gone[<-letGo] = true
	}
	for k := <-extended; k != "slow"; k = <-extended {
	}
	cancel()
	<-done
	if !gone["bad"] || !gone["stuck"] || gone["slow"] {
		t.Fatalf("let go of %v, want bad and stuck", gone)
	}
	if kp.Len() != 1 || !kp.Remove("slow") || kp.Remove("slow") {
		t.Fatalf("the keeper holds %d leases, want slow alone until removed", kp.Len())
	}
	kp.Add("a", now, now)
	if got := kp.Drain(); len(got) != 1 || got[0] != "a" || kp.Len() != 0 {
		t.Fatalf("Drain = %v, leaving %d", got, kp.Len())
	}
}

// TestKeeperPause: while paused the keeper extends nothing, however many looks
// pass (counted by the looks themselves); resumed, it extends again.
func TestKeeperPause(t *testing.T) {
	extended := make(chan string, 100)
	kp := &Keeper[string]{Every: time.Millisecond, Margin: time.Hour, Lease: time.Minute, MaxExtension: time.Hour,
		Extend: func(_ context.Context, keys []string) map[string]error {
			for _, k := range keys {
				extended <- k
			}
			return nil
		}}
	now := time.Now()
	kp.Add("held", now, now)
	resume := kp.Pause()
	for range 20 {
		kp.look(context.Background())
	}
	if len(extended) != 0 {
		t.Fatalf("%d extensions while paused, want none", len(extended))
	}
	resume()
	resume() // a second call changes nothing
	kp.look(context.Background())
	if len(extended) != 1 || <-extended != "held" {
		t.Fatal("no extension after resume")
	}
}
