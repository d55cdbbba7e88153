package idemredis

import (
	"testing"

	"github.com/idemhq/idem"
)

// scopeOf reads back every scope redisKey writes, metacharacters and colons
// included, and refuses keys of other shapes under the prefix.
func TestScopeOf(t *testing.T) {
	t.Parallel()
	for _, sc := range []string{"a", "ab", "1:a", "a:b:", "*?[x]", "%_", "ünï"} {
		key := redisKey(DefaultPrefix, idem.Key{Scope: sc, ID: "id:1"})
		if got, ok := scopeOf(DefaultPrefix, key); !ok || got != sc {
			t.Errorf("scopeOf(%q) = %q, %v; want %q", key, got, ok, sc)
		}
	}
	for _, key := range []string{"idem:", "idem:seq:x", "idem:3:ab:x", "idem:2:ab", "idem:2:ab:", "idem:0::x",
		"idem:-1:a:x", "idem:9999:a:x", "other:1:a:x", "idem:1:\x01:x"} {
		if got, ok := scopeOf(DefaultPrefix, key); ok {
			t.Errorf("scopeOf(%q) = %q, want no scope", key, got)
		}
	}
}
