package idemmysql_test

import (
	"testing"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemmysql"
	"github.com/idemhq/idem/idemtest"
)

// The suite runs on MariaDB as it is, and without its sequence and claim procedure
// (MySQL 8's paths: tokens from the AUTO_INCREMENT table).
func TestInspectorSuite(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"mariadb", mysql8Paths} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			idemtest.InspectorSuite(t, func(t *testing.T) idem.Store { return newStore(t, "", idemmysql.Config{}) })
		})
	}
}

// The store finds its table's name in its own statements; a custom table must be
// the one inspected.
func TestInspectorCustomTable(t *testing.T) {
	t.Parallel()
	s := newStore(t, "", idemmysql.Config{Table: "custom_records"})
	k := idem.Key{Scope: "s", ID: "k"}
	res := idemtest.MustClaim(t, s, idem.Claim{Key: k})
	rec, err := s.Inspect(ctxFor(t), k)
	if err != nil || rec.Token != res.Token {
		t.Fatalf("Inspect = %+v, %v; want token %d", rec, err, res.Token)
	}
	page, err := s.List(ctxFor(t), "s", "", 10)
	if err != nil || len(page.Records) != 1 || page.Records[0].Key != k {
		t.Fatalf("List = %+v, %v", page, err)
	}
}
