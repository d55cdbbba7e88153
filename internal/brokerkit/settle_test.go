package brokerkit

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/idemhq/idem"
)

// TestOnce: of concurrent settles one goes through; after an Undo the next does.
func TestOnce(t *testing.T) {
	var o Once
	var won atomic.Int32
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			if o.Begin() {
				won.Add(1)
			}
		})
	}
	wg.Wait()
	if won.Load() != 1 || !o.Taken() {
		t.Fatalf("%d of 8 concurrent settles went through, want 1", won.Load())
	}
	o.Undo()
	if !o.Begin() {
		t.Fatal("after Undo (a failed settle), the next settle was refused")
	}
}

// TestSettled: the one error of a second settle is ErrSettled, an input error
// (final) and names the settle.
func TestSettled(t *testing.T) {
	err := Settled("idemamqp", "nak", "queue q delivery tag 3")
	var in *idem.InputError
	if !errors.Is(err, idem.ErrSettled) || !errors.Is(err, idem.ErrInvalid) || !errors.As(err, &in) || idem.IsRetryable(err) {
		t.Fatalf("Settled = %v: want idem.ErrSettled, an *idem.InputError, not retryable", err)
	}
	if in.Field != "Delivery" || in.Fix == "" {
		t.Errorf("the input error names field %q, fix %q", in.Field, in.Fix)
	}
}

func TestCheckMax(t *testing.T) {
	if err := CheckMax(0); !errors.Is(err, idem.ErrInvalid) {
		t.Errorf("CheckMax(0) = %v, want idem.ErrInvalid", err)
	}
	if err := CheckMax(1); err != nil {
		t.Errorf("CheckMax(1) = %v", err)
	}
}
