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

// SleepUntil sleeps for d, but not past deadline, and reports whether the caller
// may try again: false once deadline has passed or ctx has ended.
func SleepUntil(ctx context.Context, d time.Duration, deadline time.Time) bool {
	left := time.Until(deadline)
	return left > 0 && Sleep(ctx, min(d, left))
}

// Pause is the growing pause of a caller that polls for something another holds:
// 2 ms, doubling up to 100 ms.
type Pause time.Duration

// Next returns the pause after p.
func (p Pause) Next() Pause { return min(2*p, Pause(100*time.Millisecond)) }

// FirstPause is the first Pause.
const FirstPause = Pause(2 * time.Millisecond)

// While calls try again, with a growing pause, while busy(v) holds and window has
// not run out, and returns the last value: the request middlewares' wait for a
// key another request holds (Config.Wait). It ends early when ctx does, or when
// try fails.
func While[T any](ctx context.Context, window time.Duration, v T, busy func(T) bool, try func() (T, error)) (T, error) {
	deadline := time.Now().Add(window)
	for p := FirstPause; busy(v); p = p.Next() {
		if !SleepUntil(ctx, time.Duration(p), deadline) {
			return v, nil
		}
		var err error
		if v, err = try(); err != nil {
			return v, err
		}
	}
	return v, nil
}
