// Package wait holds the blocking waits idem's loops share: a pause, and a tick
// loop, that end when their context does.
package wait

import (
	"context"
	"time"
)

// Sleep waits d, or until ctx ends; it reports whether the whole d passed.
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// Every calls fn every d until ctx ends. fn runs on the caller's goroutine, so a
// tick that comes while it runs is dropped, as time.Ticker drops it.
func Every(ctx context.Context, d time.Duration, fn func()) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			fn()
		}
	}
}
