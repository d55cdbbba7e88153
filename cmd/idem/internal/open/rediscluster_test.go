package open

import (
	"strings"
	"testing"
)

// --store redis-cluster:// is checked before anything connects; errors name the
// option and the fix.
func TestParseRedisClusterStore(t *testing.T) {
	t.Parallel()
	s, err := ParseStore("redis-cluster://u:secret@10.0.0.1:6379?addr=10.0.0.2:6379&prefix=p:&wait=1&wait_timeout=250ms&dial_timeout=1s")
	if err != nil {
		t.Fatal(err)
	}
	if s.Kind != "redis-cluster" || s.prefix != "p:" || s.cluster.wait != 1 || s.cluster.waitTimeout.String() != "250ms" ||
		len(s.cluster.opts.Addrs) != 2 || s.cluster.opts.Password != "secret" || strings.Contains(s.Desc, "secret") {
		t.Fatalf("parsed %+v (desc %q, opts %+v)", s, s.Desc, s.cluster.opts)
	}
	for _, raw := range []string{
		"redis-cluster://h:1?wait=-1",
		"redis-cluster://h:1?wait=two",
		"redis-cluster://h:1?wait=1&wait_timeout=soon",
		"redis-cluster://h:1?wait=1&wait_timeout=1h",
		"redis-cluster://h:1?prefix=%7Bt%7D:",
		"redis-cluster://h:1?colour=red",
		"redis-cluster://u:secret@h:1?wait=x",
	} {
		_, err := ParseStore(raw)
		if err == nil || !strings.Contains(err.Error(), "--store") || strings.Contains(err.Error(), "secret") {
			t.Errorf("ParseStore(%q) = %v, want an error naming --store, without the password", raw, err)
		}
	}
}
