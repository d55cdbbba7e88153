package idemredis_test

import (
	"context"
	"testing"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemredis"
	"github.com/idemhq/idem/idemtest"
	"github.com/idemhq/idem/internal/testsvc"
)

// The suite runs on a Redis of this binary's own: List walks the whole keyspace
// with SCAN, so its pages are bounded by the number of keys, and the shared Redis
// holds as many as the test binaries running beside this one write.
func TestInspectorSuite(t *testing.T) {
	t.Parallel()
	addr := testsvc.PrivateRedis(t)
	idemtest.InspectorSuite(t, func(t *testing.T) idem.Store { return setupAt(t, addr, idemredis.Config{}).store })
}

// A prefix with glob metacharacters lists only its own keys, not those of a prefix
// the unescaped pattern would match.
func TestListPrefixMetacharacters(t *testing.T) {
	t.Parallel()
	base := setup(t, idemredis.Config{}).prefix
	glob := setup(t, idemredis.Config{Prefix: base + "*:"}).store
	other := setup(t, idemredis.Config{Prefix: base + "x:"}).store
	k := idem.Key{Scope: "s", ID: "mine"}
	idemtest.MustClaim(t, glob, idem.Claim{Key: k})
	idemtest.MustClaim(t, other, idem.Claim{Key: idem.Key{Scope: "s", ID: "other"}})
	var ids []string
	for cursor := ""; ; {
		page, err := glob.List(context.Background(), "s", cursor, 10)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range page.Records {
			ids = append(ids, r.Key.ID)
		}
		if cursor = page.Next; cursor == "" {
			break
		}
	}
	if len(ids) != 1 || ids[0] != "mine" {
		t.Fatalf("List under prefix %q = %q, want [mine]", base+"*:", ids)
	}
}
