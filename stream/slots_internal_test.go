package stream

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
)

// Sockets arriving from many goroutines at once: the pending pool never exceeds
// its bound (the oldest evicted with errEvicted), admitted sockets never exceed
// theirs nor a principal's, and every slot comes back.
func TestSlotsUnderConcurrency(t *testing.T) {
	t.Parallel()
	const maxPending, maxConns, perPrincipal = 4, 6, 2
	pending, overflow := 0, 0
	s := newSlots(maxPending, maxConns, perPrincipal, func(d int) {
		if pending += d; pending > maxPending || pending < 0 {
			overflow++ // called under s.mu
		}
	})
	var wg sync.WaitGroup
	var mu sync.Mutex
	admitted, evicted := 0, 0
	for i := range 64 {
		wg.Go(func() {
			ctx, cancel := context.WithCancelCause(context.Background())
			defer cancel(nil)
			e := s.wait(cancel)
			release, no := s.admit(fmt.Sprint("user-", i%5))
			if !s.done(e) && no == nil {
				release()
				no = &refusal{code: "evicted"}
			}
			if no != nil {
				if no.code == "evicted" && !errors.Is(context.Cause(ctx), errEvicted) {
					t.Errorf("socket %d: refused as evicted, but its cause is %v", i, context.Cause(ctx))
				}
				mu.Lock()
				evicted += map[bool]int{true: 1}[no.code == "evicted"]
				mu.Unlock()
				return
			}
			s.mu.Lock()
			if s.admitted > maxConns || s.byPrincipal[fmt.Sprint("user-", i%5)] > perPrincipal {
				t.Errorf("admitted %d (max %d), principal %d (max %d)", s.admitted, maxConns, s.byPrincipal[fmt.Sprint("user-", i%5)], perPrincipal)
			}
			s.mu.Unlock()
			mu.Lock()
			admitted++
			mu.Unlock()
			release()
			release() // idempotent
		})
	}
	wg.Wait()
	s.mu.Lock()
	defer s.mu.Unlock()
	if overflow > 0 || pending != 0 || s.pending.Len() != 0 || s.admitted != 0 || len(s.byPrincipal) != 0 || admitted == 0 {
		t.Fatalf("after the storm: %d overflows, pending %d/%d, admitted %d, principals %v; %d admitted, %d evicted",
			overflow, pending, s.pending.Len(), s.admitted, s.byPrincipal, admitted, evicted)
	}
}
