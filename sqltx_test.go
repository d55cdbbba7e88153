package idem_test

import (
	"slices"
	"testing"

	"github.com/idemhq/idem"
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
		got, args := idem.Rebind(tc.in, tc.args)
		if got != tc.want || !slices.Equal(args, tc.wantArgs) && len(args)+len(tc.wantArgs) > 0 {
			t.Errorf("Rebind(%q, %v) = %q, %v; want %q, %v", tc.in, tc.args, got, args, tc.want, tc.wantArgs)
		}
	}
}
