package idemmem_test

import (
	"context"
	"errors"
	"testing"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemmem"
	"github.com/idemhq/idem/idemtest"
)

func TestInspectorSuite(t *testing.T) {
	t.Parallel()
	idemtest.InspectorSuite(t, func(t *testing.T) idem.Store {
		return newStore(t, idemmem.Config{KeepKeys: true})
	})
}

// Without KeepKeys the store cannot name its keys: List says so, while Inspect and
// Evict, which are given the key, still work.
func TestListNeedsKeepKeys(t *testing.T) {
	t.Parallel()
	s := newStore(t, idemmem.Config{})
	ctx := context.Background()
	k := idem.Key{Scope: "s", ID: "k"}
	res := idemtest.MustClaim(t, s, idem.Claim{Key: k})
	var be *idem.BackendError
	if _, err := s.List(ctx, "s", "", 10); !errors.As(err, &be) {
		t.Fatalf("List without KeepKeys: %v, want a *idem.BackendError", err)
	}
	if _, err := s.Scopes(ctx, "", 10); !errors.As(err, &be) {
		t.Fatalf("Scopes without KeepKeys: %v, want a *idem.BackendError", err)
	}
	if rec, err := s.Inspect(ctx, k); err != nil || rec.Token != res.Token {
		t.Fatalf("Inspect = %+v, %v", rec, err)
	}
	if _, err := s.Evict(ctx, k, true); err != nil {
		t.Fatal(err)
	}
}

// The key text kept for List is counted in the budget and given back with the record.
func TestKeepKeysBudget(t *testing.T) {
	t.Parallel()
	s := newStore(t, idemmem.Config{KeepKeys: true, Shards: 1})
	base := s.Bytes()
	k := idem.Key{Scope: "scope", ID: "an-id-of-some-length"}
	res := idemtest.MustClaim(t, s, idem.Claim{Key: k})
	with := s.Bytes()
	if err := s.Release(context.Background(), k, res.Token); err != nil {
		t.Fatal(err)
	}
	if got := s.Bytes(); got != base {
		t.Fatalf("Bytes after Release = %d, want %d (with the record: %d)", got, base, with)
	}
	plain := newStore(t, idemmem.Config{Shards: 1})
	b0 := plain.Bytes()
	idemtest.MustClaim(t, plain, idem.Claim{Key: k})
	if with-base <= plain.Bytes()-b0 {
		t.Fatalf("a kept key costs %d bytes, no more than a record without its text (%d)", with-base, plain.Bytes()-b0)
	}
}
