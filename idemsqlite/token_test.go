package idemsqlite_test

import (
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemsqlite"
)

// The interleaving that broke idempg's tokens: a claim arrives while a transaction
// releases the key, claims it again and releases it again. Here the transaction
// holds the file's write lock from BEGIN, so the concurrent claim is applied only
// after the commit, and its token is drawn then, above the transaction's.
func TestTokenRisesAfterWaitingOnRelease(t *testing.T) {
	t.Parallel()
	ctx := ctxFor(t)
	s, _ := openStore(t, idemsqlite.Config{})
	k := idem.Key{Scope: "s", ID: "k"}
	c := idem.Claim{Key: k, Lease: time.Minute}

	first, err := s.Claim(ctx, c)
	if err != nil || first.Outcome != idem.Acquired {
		t.Fatalf("first claim: %+v %v", first, err)
	}
	tx, err := s.DB().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if err := s.ReleaseTx(ctx, tx, k, first.Token); err != nil {
		t.Fatal(err)
	}

	type answer struct {
		res idem.Result
		err error
	}
	done := make(chan answer, 1)
	go func() {
		res, err := s.Claim(ctx, c) // through the writer, which waits for tx's lock
		done <- answer{res, err}
	}()

	again, err := s.ClaimTx(ctx, tx, c)
	if err != nil || again.Outcome != idem.Acquired {
		t.Fatalf("ClaimTx: %+v %v", again, err)
	}
	if err := s.ReleaseTx(ctx, tx, k, again.Token); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	a := <-done
	if a.err != nil || a.res.Outcome != idem.Acquired {
		t.Fatalf("concurrent claim: %+v %v", a.res, a.err)
	}
	if a.res.Token <= again.Token || again.Token <= first.Token {
		t.Fatalf("tokens of key %v: %d, then %d in the transaction, then %d for the concurrent claim: not rising",
			k, first.Token, again.Token, a.res.Token)
	}
}
