package idemsql_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/idemhq/idem/idemsql"
)

func TestRebind(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in, want string
		args     []any
		wantArgs []any
	}{
		{"SELECT 1", "SELECT 1", nil, nil},
		{"SELECT $2, $1, $2", "SELECT ?, ?, ?", []any{"a", "b"}, []any{"b", "a", "b"}},
		{"VALUES ($1, $7, $7)", "VALUES (?, ?, ?)", []any{1, 2, 3, 4, 5, 6, 7}, []any{1, 7, 7}},
		{"SELECT '$1', `a$1`, \"$1\", $1", "SELECT '$1', `a$1`, \"$1\", ?", []any{"x"}, []any{"x"}},
		{"SELECT $10", "SELECT ?", []any{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, []any{9}},
		{"SELECT $3", "SELECT $3", []any{1}, []any{}}, // no such argument: left for the server to refuse
		{"SELECT 'it''s $1', $1", "SELECT 'it''s $1', ?", []any{"x"}, []any{"x"}},
	} {
		got, args := idemsql.Rebind(tc.in, tc.args)
		if got != tc.want || !slices.Equal(args, tc.wantArgs) && len(args)+len(tc.wantArgs) > 0 {
			t.Errorf("Rebind(%q, %v) = %q, %v; want %q, %v", tc.in, tc.args, got, args, tc.want, tc.wantArgs)
		}
	}
}

type stateErr string

func (e stateErr) Error() string    { return "state " + string(e) }
func (e stateErr) SQLState() string { return string(e) }

// A transaction rolled back for a deadlock runs again; any other error, or the
// caller's cancellation, ends the retries; the runs are bounded.
func TestRetrySerializationFailures(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	runs := 0
	err := idemsql.RetrySerializationFailures(ctx, func() error {
		if runs++; runs < 3 {
			return stateErr("40001")
		}
		return nil
	})
	if err != nil || runs != 3 {
		t.Fatalf("after two deadlocks: %v after %d runs, want success on the third", err, runs)
	}
	runs = 0
	other := errors.New("constraint violated")
	if err := idemsql.RetrySerializationFailures(ctx, func() error { runs++; return other }); err != other || runs != 1 {
		t.Fatalf("another error: %v after %d runs, want it back after one", err, runs)
	}
	runs = 0
	if err := idemsql.RetrySerializationFailures(ctx, func() error { runs++; return fmt.Errorf("x: %w", stateErr("40P01")) }); err == nil || runs != 12 {
		t.Fatalf("deadlocked every time: %v after %d runs, want the error after 12", err, runs)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	runs = 0
	if err := idemsql.RetrySerializationFailures(cctx, func() error { runs++; return stateErr("40001") }); err == nil || runs != 1 {
		t.Fatalf("cancelled: %v after %d runs, want one run", err, runs)
	}
	if !idemsql.IsSerializationFailure(errors.New("Error 1213 (40001): Deadlock found when trying to get lock")) || idemsql.IsSerializationFailure(nil) {
		t.Fatal("IsSerializationFailure misreads MySQL's deadlock message or nil")
	}
}
