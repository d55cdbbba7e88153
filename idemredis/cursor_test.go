package idemredis

import (
	"errors"
	"slices"
	"testing"

	"github.com/idemhq/idem"
	"github.com/redis/go-redis/v9"
)

// A cursor carries the scan position (a SCAN cursor, and on a cluster the shard)
// and the ids a SCAN reply left over the page; any other string, or a cursor of
// the other kind of client, is an *idem.InputError on field "cursor".
func TestListCursor(t *testing.T) {
	t.Parallel()
	node := &scanner{client: redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})}
	cluster := &scanner{client: redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}})}
	for _, tc := range []struct {
		sc      *scanner
		pos     scanPos
		pending []string
	}{
		{node, scanPos{-1, 17}, nil},
		{node, scanPos{-1, 0}, []string{"a", "b c", "ü*?[]\\"}},
		{node, scanPos{-1, 1<<64 - 1}, []string{"x"}},
		{cluster, scanPos{0, 17}, nil},
		{cluster, scanPos{5461, 0}, nil},
		{cluster, scanPos{slotCount, 0}, []string{"x"}},
	} {
		c, err := encodeCursor(tc.pos, tc.pending)
		if err != nil {
			t.Fatal(err)
		}
		pos, pending, finished, err := decodeCursor(tc.sc, c)
		if err != nil || pos != tc.pos || !slices.Equal(pending, tc.pending) || finished != tc.pos.done() {
			t.Fatalf("decode(encode(%v, %q)) = %v, %q, %v, %v", tc.pos, tc.pending, pos, pending, finished, err)
		}
		other := node
		if tc.sc == node {
			other = cluster
		}
		if _, _, _, err := decodeCursor(other, c); err == nil {
			t.Errorf("cursor %v decoded for the other kind of client", tc.pos)
		}
	}
	zero, _ := encodeCursor(scanPos{-1, 0}, nil)
	ctl, _ := encodeCursor(scanPos{-1, 5}, []string{"a\x01"})
	end, _ := encodeCursor(scanPos{slotCount, 0}, nil)
	for _, tc := range []struct {
		sc *scanner
		c  string
	}{{node, zero}, {node, ctl}, {node, "!"}, {node, "LTE"}, {node, "MTIK"},
		{cluster, end}, {cluster, "MTYzODUuMQ"}, {cluster, "LTEuMQ"}, {cluster, "MTYzODUuMA"}} {
		var ie *idem.InputError
		if _, _, _, err := decodeCursor(tc.sc, tc.c); !errors.As(err, &ie) || ie.Field != "cursor" {
			t.Errorf("decodeCursor(%q) = %v, want an *idem.InputError on cursor", tc.c, err)
		}
	}
}

func TestEscapeGlob(t *testing.T) {
	t.Parallel()
	if got, want := escapeGlob(`p*:1:a?[b]\`), `p\*:1:a\?\[b\]\\`; got != want {
		t.Fatalf("escapeGlob = %q, want %q", got, want)
	}
}

// FuzzDecodeCursor: a List cursor comes from the caller, so any string is decoded
// without panicking, for either kind of client, and one that decodes is the
// cursor of what it decoded to.
func FuzzDecodeCursor(f *testing.F) {
	node := &scanner{client: redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})}
	cluster := &scanner{client: redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}})}
	for _, seed := range []string{"", "MTc", "NTQ2MS4w", "MTYzODQuMAp4", "!", "LTE"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, c string) {
		for _, sc := range []*scanner{node, cluster} {
			pos, pending, _, err := decodeCursor(sc, c)
			if err != nil || c == "" {
				continue
			}
			again, err := encodeCursor(pos, pending)
			if err != nil {
				t.Fatalf("decoded %q to %v %q, which does not encode: %v", c, pos, pending, err)
			}
			if p2, pend2, _, err := decodeCursor(sc, again); err != nil || p2 != pos || !slices.Equal(pend2, pending) {
				t.Fatalf("%q: decode(encode(decode)) = %v %q %v, want %v %q", c, p2, pend2, err, pos, pending)
			}
		}
	})
}
