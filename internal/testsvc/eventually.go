package testsvc

import (
	"testing"
	"time"
)

// Eventually polls cond until it holds, and fails the test with "gave up waiting: what"
// once timeout has passed. The timeout only ends a test that hangs: pick it generously,
// since a slow machine should wait longer, not fail. The pause between polls starts at
// a millisecond and doubles up to 50ms.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	pause := time.Millisecond
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting after %v: %s", timeout, what)
		}
		time.Sleep(pause)
		if pause < 50*time.Millisecond {
			pause *= 2
		}
	}
}
