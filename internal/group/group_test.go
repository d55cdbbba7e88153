package group_test

import (
	"context"
	"runtime"
	"sync"
	"testing"

	"github.com/idemhq/idem/internal/group"
)

// TestBatcher: a lone call runs alone; 64 callers queued while both runners are
// busy are answered in batches of at most Max, each exactly once; a caller that
// gave up is finished with its context's error and never reaches Run.
func TestBatcher(t *testing.T) {
	gate, entered := make(chan struct{}), make(chan struct{}, 2)
	var mu sync.Mutex
	var sizes []int
	answered := map[int]int{}
	b := group.Batcher[int]{Runners: 2, Max: 8, Run: func(batch []*group.Item[int]) {
		if batch[0].Val < 0 { // a runner held busy
			entered <- struct{}{}
			<-gate
		}
		mu.Lock()
		sizes = append(sizes, len(batch))
		for _, it := range batch {
			answered[it.Val]++
		}
		mu.Unlock()
		for _, it := range batch {
			it.Val *= 10
			it.Finish(nil)
		}
	}}
	ctx := context.Background()
	if it, err := b.Do(ctx, 1001); err != nil || it.Val != 10010 {
		t.Fatalf("lone call = %v, %v; want 10010", it.Val, err)
	}
	if len(sizes) != 1 || sizes[0] != 1 {
		t.Fatalf("the lone call ran in batches %v, want one of 1", sizes)
	}

	var wg sync.WaitGroup
	for i := 1; i <= 2; i++ {
		wg.Add(1)
		go func() { defer wg.Done(); _, _ = b.Do(ctx, -i) }()
	}
	<-entered
	<-entered
	gone, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := b.Do(gone, 1000); err == nil {
		t.Fatal("a call whose context had ended returned no error")
	}
	results := make(chan bool, 64)
	for i := 1; i <= 64; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			it, err := b.Do(ctx, i)
			results <- err == nil && it.Val == 10*i
		}()
	}
	for b.Queued() < 65 { // the 64 and the one that gave up
		runtime.Gosched()
	}
	close(gate)
	wg.Wait()
	close(results)
	for ok := range results {
		if !ok {
			t.Fatal("a queued call got a wrong answer or an error")
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for v, n := range answered {
		if n != 1 {
			t.Errorf("call %d answered %d times", v, n)
		}
	}
	if answered[1000] != 0 {
		t.Error("a call whose caller gave up reached Run")
	}
	grouped := false
	for _, n := range sizes {
		if n > 8 {
			t.Errorf("a batch of %d, over Max 8", n)
		}
		grouped = grouped || n > 1
	}
	if !grouped {
		t.Errorf("batches %v: no group formed from 64 queued calls", sizes)
	}
}
