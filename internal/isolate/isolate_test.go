package isolate

import (
	"context"
	"errors"
	"testing"
)

// Each goes past the items that fail, counts them and keeps the first failure;
// it stops at once when ctx ends.
func TestEach(t *testing.T) {
	t.Parallel()
	first := errors.New("item 2 refused")
	var ran []int
	done, err := Each(context.Background(), []int{1, 2, 3, 4, 5}, func(i int) (bool, error) {
		ran = append(ran, i)
		switch i {
		case 2:
			return false, first
		case 4:
			return false, errors.New("item 4 refused")
		case 5:
			return false, nil // nothing to do
		}
		return true, nil
	})
	var e *Error
	if done != 2 || len(ran) != 5 || !errors.As(err, &e) || e.Failed != 2 || e.Of != 5 || !errors.Is(err, first) ||
		err.Error() != "2 of 5 failed; the first: item 2 refused" {
		t.Fatalf("Each = %d, %v (ran %v); want 2 done, 2 of 5 failed wrapping the first, every item run", done, err, ran)
	}
	if done, err := Each(context.Background(), []int{1}, func(int) (bool, error) { return true, nil }); done != 1 || err != nil {
		t.Fatalf("Each of one good item = %d, %v", done, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ran = nil
	done, err = Each(ctx, []int{1, 2, 3}, func(i int) (bool, error) {
		ran = append(ran, i)
		if i == 2 {
			cancel()
			return false, context.Canceled
		}
		return true, nil
	})
	if done != 1 || len(ran) != 2 || !errors.Is(err, context.Canceled) {
		t.Fatalf("Each with ctx ending at item 2 = %d, %v (ran %v); want it to stop there", done, err, ran)
	}
}
