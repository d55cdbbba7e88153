package idem_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"unicode"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/effect/saga"
	"github.com/idemhq/idem/idemmem"
	"github.com/idemhq/idem/inbox"
	"github.com/idemhq/idem/outbox"
)

func newMem(t *testing.T) *idemmem.Store {
	t.Helper()
	s, err := idemmem.New(idemmem.Config{})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestKeyValidate(t *testing.T) {
	t.Parallel()
	cases := []struct {
		key   idem.Key
		field string // "" means valid
	}{
		{idem.Key{Scope: "t1", ID: "550e8400-e29b-41d4-a716-446655440000"}, ""},
		{idem.Key{Scope: "tenant:op", ID: "ключ-ü"}, ""},
		{idem.Key{Scope: "s", ID: strings.Repeat("x", idem.MaxKeyLen)}, ""},
		{idem.Key{ID: "x"}, "Key.Scope"},
		{idem.Key{Scope: "s"}, "Key.ID"},
		{idem.Key{Scope: "s", ID: strings.Repeat("x", idem.MaxKeyLen+1)}, "Key.ID"},
		{idem.Key{Scope: "s", ID: "tab\there"}, "Key.ID"},
		{idem.Key{Scope: "s\n", ID: "x"}, "Key.Scope"},
		{idem.Key{Scope: "s", ID: "\xc3\x28"}, "Key.ID"},
	}
	for _, tc := range cases {
		err := tc.key.Validate()
		if tc.field == "" {
			if err != nil {
				t.Errorf("%q: unexpected error %v", tc.key, err)
			}
			continue
		}
		var ie *idem.InputError
		if !errors.As(err, &ie) || ie.Field != tc.field || !errors.Is(err, idem.ErrInvalid) {
			t.Errorf("%q: err = %v, want InputError on %s", tc.key, err, tc.field)
		}
	}
}

// The ASCII fast path must agree with unicode.IsControl on every byte, and C1
// controls after a non-ASCII rune must still be caught at the right byte.
func TestKeyValidateControlCharacters(t *testing.T) {
	t.Parallel()
	for c := rune(0); c < 0x80; c++ {
		err := idem.Key{Scope: "s", ID: "a" + string(c) + "b"}.Validate()
		if got, want := err != nil, unicode.IsControl(c); got != want {
			t.Errorf("byte %#x: rejected = %v, unicode.IsControl = %v (%v)", c, got, want, err)
		}
	}
	err := idem.Key{Scope: "s", ID: "é\u0085x"}.Validate()
	if err == nil || !strings.Contains(err.Error(), "U+0085 at byte 2") {
		t.Fatalf("C1 control after a non-ASCII rune: %v, want it named at byte 2", err)
	}
}

func TestLongIDMessageNamesLength(t *testing.T) {
	t.Parallel()
	err := idem.Key{Scope: "s", ID: strings.Repeat("x", 312)}.Validate()
	want := "idem: Key.ID is longer than 255 bytes (got 312)"
	if err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Fatalf("error = %v, want it to start with %q", err, want)
	}
}

func TestIsRetryable(t *testing.T) {
	t.Parallel()
	backend := &idem.BackendError{Backend: "postgres", Op: "claim", Err: errors.New("connection refused")}
	cases := []struct {
		err  error
		want bool
	}{
		{nil, false},
		{backend, true},
		{fmt.Errorf("wrapped: %w", backend), true},
		{&idem.BackendError{Backend: "redis", Op: "claim", Err: context.Canceled}, false},
		{idem.ErrLeaseLost, false},
		{idem.ErrCompleted, false},
		{&idem.InputError{Field: "Key.ID", Reason: "is empty"}, false},
		{errors.New("other"), false},
	}
	for _, tc := range cases {
		if got := idem.IsRetryable(tc.err); got != tc.want {
			t.Errorf("IsRetryable(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

func TestOutcomeString(t *testing.T) {
	t.Parallel()
	for o, want := range map[idem.Outcome]string{idem.Acquired: "acquired", idem.Replayed: "replayed",
		idem.InProgress: "in_progress", idem.Mismatch: "mismatch", 0: "invalid", 9: "Outcome(9)"} {
		if o.String() != want {
			t.Errorf("%d.String() = %q, want %q", o, o.String(), want)
		}
	}
}

func TestDoRunsOnceAndReplays(t *testing.T) {
	t.Parallel()
	s := newMem(t)
	ctx := context.Background()
	c := idem.Claim{Key: idem.Key{Scope: "payments", ID: "order-1"}}
	var calls atomic.Int64
	fn := func(context.Context) ([]byte, error) {
		calls.Add(1)
		return []byte("charged"), nil
	}
	for i, want := range []idem.Outcome{idem.Acquired, idem.Replayed, idem.Replayed} {
		out, o, err := idem.Do(ctx, s, c, fn)
		if err != nil || o != want || string(out) != "charged" {
			t.Fatalf("call %d: Do = %q, %v, %v; want charged, %v", i, out, o, err, want)
		}
	}
	if calls.Load() != 1 {
		t.Fatalf("fn ran %d times, want 1", calls.Load())
	}
}

func TestDoConcurrentRunsOnce(t *testing.T) {
	t.Parallel()
	s := newMem(t)
	c := idem.Claim{Key: idem.Key{Scope: "payments", ID: "hot"}}
	var calls atomic.Int64
	var wg sync.WaitGroup
	for range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, o, err := idem.Do(context.Background(), s, c, func(context.Context) ([]byte, error) {
				calls.Add(1)
				return nil, nil
			})
			if err != nil || o == idem.Mismatch {
				t.Errorf("Do = %v, %v", o, err)
			}
		}()
	}
	wg.Wait()
	if calls.Load() != 1 {
		t.Fatalf("fn ran %d times across 64 concurrent calls, want 1", calls.Load())
	}
}

func TestDoReleasesOnErrorSoRetryRuns(t *testing.T) {
	t.Parallel()
	s := newMem(t)
	ctx := context.Background()
	c := idem.Claim{Key: idem.Key{Scope: "mail", ID: "welcome-42"}}
	boom := errors.New("smtp unavailable")
	if _, _, err := idem.Do(ctx, s, c, func(context.Context) ([]byte, error) { return nil, boom }); !errors.Is(err, boom) {
		t.Fatalf("Do = %v, want fn's error", err)
	}
	out, o, err := idem.Do(ctx, s, c, func(context.Context) ([]byte, error) { return []byte("sent"), nil })
	if err != nil || o != idem.Acquired || string(out) != "sent" {
		t.Fatalf("retry after a failure: %q, %v, %v; want the retry to run", out, o, err)
	}
}

func TestDoReleasesOnPanic(t *testing.T) {
	t.Parallel()
	s := newMem(t)
	c := idem.Claim{Key: idem.Key{Scope: "s", ID: "panics"}}
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("Do swallowed fn's panic")
			}
		}()
		_, _, _ = idem.Do(context.Background(), s, c, func(context.Context) ([]byte, error) { panic("bug") })
	}()
	if _, o, err := idem.Do(context.Background(), s, c, func(context.Context) ([]byte, error) { return nil, nil }); err != nil || o != idem.Acquired {
		t.Fatalf("after a panic the key was not released: %v, %v", o, err)
	}
}

func TestDoCompletesWhenContextEndsDuringEffect(t *testing.T) {
	t.Parallel()
	s := newMem(t)
	ctx, cancel := context.WithCancel(context.Background())
	c := idem.Claim{Key: idem.Key{Scope: "s", ID: "cancelled-mid-effect"}}
	_, _, err := idem.Do(ctx, s, c, func(context.Context) ([]byte, error) {
		cancel() // the caller gives up, but the effect already happened
		return []byte("done"), nil
	})
	if err != nil {
		t.Fatalf("Do = %v", err)
	}
	out, o, err := idem.Do(context.Background(), s, c, func(context.Context) ([]byte, error) {
		t.Fatal("effect ran twice")
		return nil, nil
	})
	if err != nil || o != idem.Replayed || string(out) != "done" {
		t.Fatalf("second Do = %q, %v, %v; want the recorded result", out, o, err)
	}
}

func TestDoReportsMismatchWithoutRunning(t *testing.T) {
	t.Parallel()
	s := newMem(t)
	ctx := context.Background()
	k := idem.Key{Scope: "s", ID: "k"}
	if _, _, err := idem.Do(ctx, s, idem.Claim{Key: k, Fingerprint: []byte("a")}, func(context.Context) ([]byte, error) { return nil, nil }); err != nil {
		t.Fatal(err)
	}
	_, o, err := idem.Do(ctx, s, idem.Claim{Key: k, Fingerprint: []byte("b")}, func(context.Context) ([]byte, error) {
		t.Fatal("ran on a mismatching fingerprint")
		return nil, nil
	})
	if err != nil || o != idem.Mismatch {
		t.Fatalf("Do = %v, %v; want Mismatch", o, err)
	}
}

// Every package's "no such item" error matches the one sentinel.
func TestNotFoundIsOneName(t *testing.T) {
	for _, err := range []error{outbox.ErrNotParked, inbox.ErrNoDeadLetter, saga.ErrNotFound, fmt.Errorf("wrapped: %w", outbox.ErrNotParked)} {
		if !errors.Is(err, idem.ErrNotFound) {
			t.Errorf("%v does not match idem.ErrNotFound", err)
		}
	}
	if errors.Is(outbox.ErrNotParked, inbox.ErrNoDeadLetter) {
		t.Error("outbox.ErrNotParked matches inbox.ErrNoDeadLetter: each keeps its own identity")
	}
}
