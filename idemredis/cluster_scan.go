package idemredis

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// slotCount is the number of Redis Cluster hash slots; as a shard's slot in a scan
// position it means the walk is over.
const slotCount = 16384

// scanPos is where a walk of the keyspace stands: a SCAN cursor and, on a Redis
// Cluster, the shard it belongs to, named by the lowest slot its master serves (a
// name that survives the failover of that master to its replica). A walk visits the
// shards in the order of their lowest slots. On one node shard is -1.
type scanPos struct {
	shard int
	cur   uint64
}

// done reports whether the walk is over.
func (p scanPos) done() bool { return p.cur == 0 && (p.shard == -1 || p.shard == slotCount) }

func (p scanPos) String() string {
	if p.shard < 0 {
		return strconv.FormatUint(p.cur, 10)
	}
	return strconv.Itoa(p.shard) + "." + strconv.FormatUint(p.cur, 10)
}

func parseScanPos(s string) (scanPos, bool) {
	shard, cur, ok := strings.Cut(s, ".")
	if !ok {
		c, err := strconv.ParseUint(s, 10, 64)
		return scanPos{shard: -1, cur: c}, err == nil
	}
	sh, err1 := strconv.Atoi(shard)
	c, err2 := strconv.ParseUint(cur, 10, 64)
	if err1 != nil || err2 != nil || sh < 0 || sh > slotCount || (sh == slotCount && c != 0) {
		return scanPos{}, false
	}
	return scanPos{shard: sh, cur: c}, true
}

// shard is one master of a cluster and the lowest slot it serves.
type shard struct {
	low    int
	client *redis.Client
}

// scanner walks the keys matching a pattern: SCAN on one node, or SCAN on each
// master of a cluster in turn. Its shard list is read once, on first use.
type scanner struct {
	client redis.UniversalClient
	shards []shard
}

// start is the position of a fresh walk.
func (sc *scanner) start() scanPos {
	if _, ok := sc.client.(*redis.ClusterClient); ok {
		return scanPos{shard: 0}
	}
	return scanPos{shard: -1}
}

// check refuses a position of the other kind (a cluster cursor on one node, or the
// reverse).
func (sc *scanner) check(p scanPos) bool {
	_, cluster := sc.client.(*redis.ClusterClient)
	return cluster == (p.shard >= 0)
}

// step runs one SCAN from p and returns the keys and the next position.
func (sc *scanner) step(ctx context.Context, p scanPos, pattern string, count int64) ([]string, scanPos, error) {
	cc, ok := sc.client.(*redis.ClusterClient)
	if !ok {
		keys, next, err := sc.client.Scan(ctx, p.cur, pattern, count).Result()
		return keys, scanPos{shard: -1, cur: next}, err
	}
	if sc.shards == nil {
		shards, err := clusterShards(ctx, cc)
		if err != nil {
			return nil, p, err
		}
		sc.shards = shards
	}
	i := sort.Search(len(sc.shards), func(i int) bool { return sc.shards[i].low >= p.shard })
	if i == len(sc.shards) {
		return nil, scanPos{shard: slotCount}, nil
	}
	cur := p.cur
	if sc.shards[i].low != p.shard {
		cur = 0 // the shard was resharded away since the last page: walk its successor whole
	}
	keys, next, err := sc.shards[i].client.Scan(ctx, cur, pattern, count).Result()
	if err != nil {
		return nil, p, err
	}
	if next != 0 {
		return keys, scanPos{shard: sc.shards[i].low, cur: next}, nil
	}
	if i+1 < len(sc.shards) {
		return keys, scanPos{shard: sc.shards[i+1].low}, nil
	}
	return keys, scanPos{shard: slotCount}, nil
}

// clusterShards lists the masters of cc that serve slots, by their lowest slot.
func clusterShards(ctx context.Context, cc *redis.ClusterClient) ([]shard, error) {
	//lint:ignore SA1019 CLUSTER SLOTS answers on every Redis that has clusters; CLUSTER SHARDS only from 7.0, and the scan needs nothing it adds
	slots, err := cc.ClusterSlots(ctx).Result()
	if err != nil {
		return nil, err
	}
	low := map[string]int{}
	for _, s := range slots {
		if len(s.Nodes) == 0 {
			continue
		}
		addr := s.Nodes[0].Addr
		if l, ok := low[addr]; !ok || s.Start < l {
			low[addr] = s.Start
		}
	}
	var mu sync.Mutex
	masters := map[string]*redis.Client{}
	err = cc.ForEachMaster(ctx, func(_ context.Context, c *redis.Client) error {
		mu.Lock()
		defer mu.Unlock()
		masters[c.Options().Addr] = c
		return nil
	})
	if err != nil {
		return nil, err
	}
	shards := make([]shard, 0, len(low))
	for addr, l := range low {
		m, ok := masters[addr]
		if !ok {
			return nil, fmt.Errorf("cluster slots name master %s, which the cluster client does not know yet; retry", addr)
		}
		shards = append(shards, shard{low: l, client: m})
	}
	sort.Slice(shards, func(i, j int) bool { return shards[i].low < shards[j].low })
	return shards, nil
}
