package idemmysql_test

import (
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemmysql"
	"github.com/idemhq/idem/internal/testsvc"
)

// MariaDB reads a statement's clock (UTC_TIMESTAMP) when the statement starts, and the
// statement may then wait for the row lock of a Release of the same token until that
// Release commits. A Complete or Renew that started so must still find the lease
// ended: issue 29 item 12, where Release ended the lease at its own clock reading, so
// that such a Complete succeeded after the Release had, and a Renew brought the
// released lease back. A session whose clock is set back (SET timestamp) plays that
// statement, without a race; idemtest's Linearizable case finds the race itself.
func TestReleaseEndsLeaseForEarlierStatements(t *testing.T) {
	t.Parallel()
	u := testsvc.MySQLDatabase(t)
	s, err := idemmysql.Open(ctxFor(t), u, idemmysql.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	var now float64
	if err := s.DB().QueryRowContext(ctxFor(t), "SELECT UNIX_TIMESTAMP(NOW(6))").Scan(&now); err != nil {
		t.Fatal(err)
	}
	// Every statement of this store reads the same instant, a second before any
	// statement below: as if each started then and waited for the lock until now.
	behind, err := idemmysql.Open(ctxFor(t), u+"?timestamp="+strconv.FormatFloat(now-1, 'f', 6, 64), idemmysql.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { behind.Close() })

	ctx := ctxFor(t)
	k := idem.Key{Scope: "s", ID: t.Name()}
	c := idem.Claim{Key: k, Lease: time.Hour}
	res, err := s.Claim(ctx, c)
	if err != nil || res.Outcome != idem.Acquired {
		t.Fatalf("Claim = %+v, %v; want acquired", res, err)
	}
	if err := s.Release(ctx, k, res.Token); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if err := behind.Complete(ctx, k, res.Token, []byte("late")); !errors.Is(err, idem.ErrLeaseLost) {
		t.Fatalf("Complete of the released token by a statement that started before the Release = %v, want ErrLeaseLost", err)
	}
	if err := behind.Renew(ctx, k, res.Token, time.Hour); !errors.Is(err, idem.ErrLeaseLost) {
		t.Fatalf("Renew of the released token by a statement that started before the Release = %v, want ErrLeaseLost", err)
	}
	if err := behind.Release(ctx, k, res.Token); err != nil {
		t.Fatalf("Release again by a statement that started before the first = %v, want nil (nothing live to release)", err)
	}
	next, err := s.Claim(ctx, c)
	if err != nil || next.Outcome != idem.Acquired || next.Token <= res.Token {
		t.Fatalf("Claim after the release = %+v, %v; want acquired with a token above %d", next, err, res.Token)
	}
}
