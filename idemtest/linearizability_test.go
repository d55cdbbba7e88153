package idemtest_test

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemmem"
	"github.com/idemhq/idem/idemtest"
)

// A checker that never fails proves nothing: each broken store below must be caught.
func TestLinearizabilityCatchesBrokenStores(t *testing.T) {
	t.Parallel()
	broken := map[string]func(inner *idemmem.Store) idem.Store{
		// Tokens fall from one incarnation of a key to the next.
		"falling tokens": func(inner *idemmem.Store) idem.Store {
			return &fallingTokens{Store: inner, real: map[uint64]uint64{}}
		},
		// A claimant of a held key is told it acquired it too.
		"two holders": func(inner *idemmem.Store) idem.Store { return &twoHolders{Store: inner} },
		// A Complete of a token being released succeeds too (MariaDB's, issue 29
		// item 12): only clients that share a live token can show it.
		"release overtaken": func(inner *idemmem.Store) idem.Store { return &overtakenRelease{Store: inner} },
	}
	for name, wrap := range broken {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			// A history may by chance not show the flaw (no key claimed twice, say);
			// three in a row would be a broken checker.
			for attempt := range 3 {
				inner, err := idemmem.New(idemmem.Config{})
				if err != nil {
					t.Fatal(err)
				}
				rep, err := idemtest.CheckLinearizability(context.Background(), wrap(inner), t.Name(),
					idemtest.LinearizabilityOptions{Seed: uint64(attempt + 1), Timeout: 20 * time.Second})
				if err != nil {
					t.Fatal(err)
				}
				t.Log(rep)
				if rep.Result == idemtest.NotLinearizable {
					return
				}
			}
			t.Fatal("the checker passed three histories of a broken store")
		})
	}
}

// fallingTokens hands out tokens that decrease over time, translating them back.
type fallingTokens struct {
	*idemmem.Store
	mu   sync.Mutex
	real map[uint64]uint64 // handed-out token → the inner store's
}

func (s *fallingTokens) Claim(ctx context.Context, c idem.Claim) (idem.Result, error) {
	res, err := s.Store.Claim(ctx, c)
	if err == nil && res.Outcome == idem.Acquired {
		fake := uint64(1<<62) - res.Token
		s.mu.Lock()
		s.real[fake] = res.Token
		s.mu.Unlock()
		res.Token = fake
	}
	return res, err
}

func (s *fallingTokens) inner(token uint64) uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r, ok := s.real[token]; ok {
		return r
	}
	return token
}

func (s *fallingTokens) Complete(ctx context.Context, k idem.Key, token uint64, result []byte) error {
	return s.Store.Complete(ctx, k, s.inner(token), result)
}

func (s *fallingTokens) Release(ctx context.Context, k idem.Key, token uint64) error {
	return s.Store.Release(ctx, k, s.inner(token))
}

func (s *fallingTokens) Renew(ctx context.Context, k idem.Key, token uint64, lease time.Duration) error {
	return s.Store.Renew(ctx, k, s.inner(token), lease)
}

// twoHolders answers every other InProgress claim with Acquired and a new token.
type twoHolders struct {
	*idemmem.Store
	n atomic.Uint64
}

func (s *twoHolders) Claim(ctx context.Context, c idem.Claim) (idem.Result, error) {
	res, err := s.Store.Claim(ctx, c)
	if err == nil && res.Outcome == idem.InProgress && s.n.Add(1)%2 == 0 {
		return idem.Result{Outcome: idem.Acquired, Token: 1<<62 + s.n.Load()}, nil
	}
	return res, err
}

// overtakenRelease answers a Complete of a token whose Release is under way with
// success, as MariaDB did to a Complete whose statement read the clock before the
// Release's and then waited for its row lock.
type overtakenRelease struct {
	*idemmem.Store
	releasing sync.Map // heldToken → struct{} while its Release runs
}

type heldToken struct {
	k     idem.Key
	token uint64
}

func (s *overtakenRelease) Release(ctx context.Context, k idem.Key, token uint64) error {
	s.releasing.Store(heldToken{k, token}, struct{}{})
	defer s.releasing.Delete(heldToken{k, token})
	runtime.Gosched() // a Release that takes a moment, as one with a round trip does
	return s.Store.Release(ctx, k, token)
}

func (s *overtakenRelease) Complete(ctx context.Context, k idem.Key, token uint64, result []byte) error {
	if _, ok := s.releasing.Load(heldToken{k, token}); ok {
		return nil
	}
	return s.Store.Complete(ctx, k, token, result)
}
