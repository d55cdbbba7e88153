package main

import (
	"context"
	"io"
	"regexp"
	"testing"
	"time"

	"github.com/idemhq/idem/internal/testsvc"
)

// daemon is an idem command (relay, serve) running in a goroutine.
type daemon struct {
	name   string
	stderr *testsvc.Buffer
	cancel context.CancelFunc
	done   chan struct{} // closed when Run returned err
	err    error
}

// startDaemon runs `idem args…` and returns once its stderr matches listening, with
// the submatches (the addresses it bound).
func startDaemon(t testing.TB, listening *regexp.Regexp, args ...string) (*daemon, []string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	d := &daemon{name: args[0], stderr: &testsvc.Buffer{}, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(d.done)
		d.err = NewMain(io.Discard, d.stderr).Run(ctx, args)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-d.done:
		case <-time.After(30 * time.Second):
		}
	})
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); {
		if m := listening.FindStringSubmatch(d.stderr.String()); m != nil {
			return d, m[1:]
		}
		select {
		case <-d.done:
			t.Fatalf("idem %v exited: %v\n%s", args, d.err, d.stderr)
		case <-time.After(10 * time.Millisecond):
		}
	}
	t.Fatalf("idem %s did not listen within 30s:\n%s", d.name, d.stderr)
	return nil, nil
}

// stop cancels the daemon as SIGTERM would and checks it exits cleanly.
func (d *daemon) stop(t testing.TB) {
	t.Helper()
	d.cancel()
	select {
	case <-d.done:
		if d.err != nil {
			t.Fatalf("idem %s stopped with %v, want nil\n%s", d.name, d.err, d.stderr)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("idem %s did not stop within 30s of its cancellation\n%s", d.name, d.stderr)
	}
}
