package idemseq_test

import (
	"context"
	"fmt"

	"github.com/idemhq/idem/idemseq"
)

// A consumer keeps one window per producer: numbers may arrive out of order or twice,
// and a zombie incarnation of the producer is fenced after the restart registered.
func ExampleMemory() {
	ctx := context.Background()
	tracker, _ := idemseq.NewMemory(idemseq.Config{Window: 1024})

	old, _ := tracker.Register(ctx, "orders-service")
	for _, seq := range []uint64{1, 2, 4, 3, 3} {
		v, _ := tracker.Check(ctx, "orders-service", old.Epoch, seq)
		fmt.Println(seq, v)
	}

	restarted, _ := tracker.Register(ctx, "orders-service")
	fmt.Println("restarted at epoch", restarted.Epoch, "continuing from", restarted.Next)
	v, _ := tracker.Check(ctx, "orders-service", old.Epoch, 5)
	fmt.Println("zombie's 5:", v)
	v, _ = tracker.Check(ctx, "orders-service", restarted.Epoch, 5)
	fmt.Println("new 5:", v)
	// Output:
	// 1 accepted
	// 2 accepted
	// 4 accepted
	// 3 accepted
	// 3 duplicate
	// restarted at epoch 2 continuing from 5
	// zombie's 5: fenced
	// new 5: accepted
}
