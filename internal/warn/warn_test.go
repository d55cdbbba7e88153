package warn

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
)

// A series of 100 failures writes 5 warnings (the 1st, 8th, 16th, 32nd and 64th)
// and one line when it ends; the next failure starts a new series.
func TestRepeatsCollapse(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	r := New(slog.New(slog.NewTextHandler(&buf, nil)), "relay: round failed", "relay: rounds succeed again")
	ctx := context.Background()
	logged := 0
	for i := 1; i <= 100; i++ {
		if r.Fail(ctx, fmt.Errorf("connection refused (%d)", i)) {
			logged++
		}
	}
	if r.Failing() != 100 {
		t.Errorf("Failing() = %d, want 100", r.Failing())
	}
	r.OK(ctx)
	r.OK(ctx) // no series: nothing
	r.Fail(ctx, errors.New("timeout"))
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	warns := 0
	for _, l := range lines {
		if strings.Contains(l, "level=WARN") {
			warns++
		}
	}
	if logged != 5 || warns != 6 || len(lines) != 7 {
		t.Fatalf("logged %d, %d warnings in %d lines, want 5 of the series, 6 in all, and 7 lines:\n%s", logged, warns, len(lines), buf.String())
	}
	for i, want := range []string{`err="connection refused (1)"`, "failures=8 ", "failures=16 ", "failures=32 ", "failures=64 "} {
		if !strings.Contains(lines[i], want) {
			t.Errorf("line %d = %q, want %q", i+1, lines[i], want)
		}
	}
	if !strings.Contains(lines[4], `err="connection refused (64)"`) {
		t.Errorf("the 64th failure's line = %q, want its own error", lines[4])
	}
	if !strings.Contains(lines[5], "level=INFO") || !strings.Contains(lines[5], "rounds succeed again") || !strings.Contains(lines[5], "failures=100") {
		t.Errorf("the end of the series = %q, want an info line with failures=100", lines[5])
	}
	if !strings.Contains(lines[6], `err=timeout`) || strings.Contains(lines[6], "failures=") {
		t.Errorf("a new series' first line = %q, want its error and no count", lines[6])
	}
}

// Concurrent failures are each counted once.
func TestRepeatsConcurrent(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	var mu sync.Mutex
	r := New(slog.New(slog.NewTextHandler(&lockedWriter{&mu, &buf}, nil)), "x failed", "x works")
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Go(func() {
			for i := 0; i < 128; i++ {
				r.Fail(context.Background(), errors.New("down"))
			}
		})
	}
	wg.Wait()
	if r.Failing() != 1024 {
		t.Fatalf("Failing() = %d, want 1024", r.Failing())
	}
	mu.Lock()
	defer mu.Unlock()
	if n := strings.Count(buf.String(), "level=WARN"); n != 9 { // 1, 8, 16, …, 1024
		t.Fatalf("%d warnings for 1024 failures, want 9:\n%s", n, buf.String())
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
