package wait_test

import (
	"context"
	"testing"
	"time"

	"github.com/idemhq/idem/internal/wait"
)

func TestSleep(t *testing.T) {
	t.Parallel()
	if !wait.Sleep(context.Background(), time.Millisecond) {
		t.Error("Sleep with a live ctx = false, want true")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if wait.Sleep(ctx, time.Hour) {
		t.Error("Sleep with an ended ctx = true, want false")
	}
}

// Every keeps calling fn, and returns once ctx has ended (a tick already due then
// may still run fn once more).
func TestEvery(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	calls := 0
	wait.Every(ctx, time.Millisecond, func() {
		if calls++; calls == 3 {
			cancel()
		}
	})
	if calls < 3 {
		t.Errorf("Every returned after %d calls, before ctx ended", calls)
	}
}
