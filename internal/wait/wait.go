// Package wait holds the one blocking wait idem's loops share: a pause that ends
// early when its context does.
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
