package main

import (
	"net/url"
	"testing"

	"github.com/idemhq/idem/internal/testsvc"
)

// serve on a Redis Cluster with WAIT for one replica: a keyed request runs upstream
// once and its replay comes from the cluster.
func TestServeRedisClusterStore(t *testing.T) {
	t.Parallel()
	rc := testsvc.StartRedisCluster(t)
	addrs := rc.Addrs()
	raw := "redis-cluster://" + addrs[0] + "?addr=" + addrs[1] + "&addr=" + addrs[2] +
		"&wait=1&wait_timeout=2s&prefix=" + url.QueryEscape(testsvc.UniqueName("idemtest:serve:")+":")
	up := newUpstream(t, nil, nil)
	g := startGateway(t, up.URL, "--store", raw)
	checkReplay(t, g, up, "cluster-1")
	g.stop(t)
}
