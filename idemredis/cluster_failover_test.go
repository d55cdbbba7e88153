package idemredis_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemredis"
	"github.com/idemhq/idem/internal/testsvc"
)

// The failover tests kill and pause nodes of the shared cluster, so they do not
// call t.Parallel: Go runs them before any parallel test resumes, and each leaves
// the cluster healthy (the killed master restarted as a replica) before it ends.

// failoverClient is a cluster client that gives up on a dead node quickly, so the
// workers of a failover test see errors and retry rather than hang.
func failoverClient(t *testing.T, rc *testsvc.RedisCluster) *redis.ClusterClient {
	return rc.Client(t, &redis.ClusterOptions{MaxRedirects: 16, MaxRetries: 2,
		DialTimeout: 500 * time.Millisecond, ReadTimeout: 2 * time.Second, WriteTimeout: 2 * time.Second})
}

// masterOf returns the index of the node that is master of key's slot.
func masterOf(t *testing.T, ctx context.Context, b clusterBundle, key string) int {
	t.Helper()
	m, err := b.client.MasterForKey(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	i := b.cluster.Node(m.Options().Addr)
	if i < 0 {
		t.Fatalf("master %s of %q is not a node of the test cluster", m.Options().Addr, key)
	}
	return i
}

// pause stops node i (SIGSTOP) until the returned resume is called, or the test
// ends.
func pause(t *testing.T, rc *testsvc.RedisCluster, i int) (resume func()) {
	t.Helper()
	if err := rc.Pause(i); err != nil {
		t.Fatal(err)
	}
	resumed := false
	t.Cleanup(func() {
		if !resumed {
			_ = rc.Resume(i)
		}
	})
	return func() {
		t.Helper()
		if err := rc.Resume(i); err != nil {
			t.Fatal(err)
		}
		resumed = true
	}
}

// cutReplicas kills node i's replication links. A paused replica still receives
// what its kernel buffers: with its link cut too, nothing the master writes from
// now on reaches it, as in a network partition.
func cutReplicas(t *testing.T, ctx context.Context, rc *testsvc.RedisCluster, i int) {
	t.Helper()
	master := redis.NewClient(&redis.Options{Addr: rc.Addr(i)})
	defer master.Close()
	if err := master.ClientKillByFilter(ctx, "TYPE", "replica").Err(); err != nil {
		t.Fatalf("cut the replication link: %v", err)
	}
}

// restartHealthy restarts node i and waits until the cluster is whole again.
func restartHealthy(t *testing.T, rc *testsvc.RedisCluster, i int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := rc.Restart(ctx, i); err != nil {
		t.Fatalf("restart node %d: %v", i, err)
	}
	if err := rc.WaitHealthy(ctx); err != nil {
		t.Fatalf("cluster after restarting node %d: %v", i, err)
	}
}

// TestClusterFailoverKeepsWaitedCompletes: eight workers claim and complete fresh
// keys with WaitReplicas 1 while the replica of one shard is cut off (paused, its
// link killed) and then its master killed with SIGKILL, the replica promoted (after
// cluster-node-timeout) and the killed node restarted as the new master's replica.
// Every Complete that returned nil (WAIT acknowledged by a replica) must be found
// completed, with its result, once the run is over; among them, keys of the killed
// shard completed before the kill. With WaitReplicas 0 the same run loses the
// completes the cut-off master acknowledged, and fails.
func TestClusterFailoverKeepsWaitedCompletes(t *testing.T) {
	b := clusterSetup(t)
	b.client = failoverClient(t, b.cluster)
	s := b.store(t, idemredis.Config{WaitReplicas: 1, WaitTimeout: 500 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	probe := s.Key(idem.Key{Scope: "f", ID: "probe"})
	victim := masterOf(t, ctx, b, probe)

	type acked struct {
		key        idem.Key
		beforeKill bool
	}
	var (
		mu      sync.Mutex
		done    []acked
		killed  atomic.Bool
		failed  atomic.Int64 // calls that returned an error (and were retried)
		stop    = make(chan struct{})
		workers sync.WaitGroup
	)
	count := func() int { mu.Lock(); defer mu.Unlock(); return len(done) }
	for w := range 8 {
		workers.Add(1)
		go func() {
			defer workers.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				k := idem.Key{Scope: "f", ID: fmt.Sprintf("w%d-%d", w, i)}
				before := !killed.Load()
				if completeOnce(ctx, s, k, &failed) {
					mu.Lock()
					done = append(done, acked{k, before})
					mu.Unlock()
				}
			}
		}()
	}
	stopOnce := sync.OnceFunc(func() { close(stop); workers.Wait() })
	defer stopOnce()
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		testsvc.Eventually(t, 2*time.Minute, what, cond)
	}
	waitFor("300 acknowledged completes", func() bool { return count() >= 300 })

	// The worst case for asynchronous replication: the replica falls behind (paused,
	// its link cut, as in a partition) while the workers go on, and then the master
	// dies. Without WAIT, what the master acknowledged meanwhile is lost (the test
	// then fails); with it, those calls fail instead.
	replica, err := b.cluster.ReplicaOf(ctx, victim)
	if err != nil || replica < 0 {
		t.Fatalf("replica of node %d: %d, %v", victim, replica, err)
	}
	resume := pause(t, b.cluster, replica)
	cutReplicas(t, ctx, b.cluster, victim)
	cutAt, failedAt := count(), failed.Load()
	waitFor("writes to the cut-off shard, refused or acknowledged", func() bool {
		return failed.Load() >= failedAt+16 || count() >= cutAt+300
	})
	killed.Store(true)
	b.cluster.Kill(victim)
	resume()
	promoted, err := b.cluster.WaitMaster(ctx, b.client, probe, victim)
	if err != nil {
		t.Fatalf("no replica promoted for node %d's slots: %v", victim, err)
	}
	t.Logf("killed master %d, replica %d promoted", victim, promoted)
	restartHealthy(t, b.cluster, victim)
	mark := count()
	waitFor("300 more acknowledged completes after the failover", func() bool { return count() >= mark+300 })
	stopOnce()

	onVictim, lost := 0, 0
	for _, a := range done {
		rec, err := s.Inspect(ctx, a.key)
		if err != nil || rec.State != idem.StateCompleted || string(rec.Result) != "r-"+a.key.ID {
			if lost++; lost <= 10 {
				t.Errorf("%v, acknowledged completed (before the kill: %v), is now %+v, %v", a.key, a.beforeKill, rec, err)
			}
			continue
		}
		if a.beforeKill && masterOf(t, ctx, b, s.Key(a.key)) == promoted {
			onVictim++
		}
	}
	t.Logf("%d completes acknowledged, %d of them lost; %d found on the killed shard, completed before the kill; %d calls failed and were retried",
		len(done), lost, onVictim, failed.Load())
	if lost > 0 {
		t.Fatalf("%d acknowledged completes lost in the failover", lost)
	}
	if onVictim == 0 {
		t.Fatal("no acknowledged complete on the killed shard before the kill: the test proved nothing")
	}
}

// completeOnce claims k and completes it with "r-"+id, retrying failed calls, and
// reports whether a Complete returned nil. A claim whose reply was lost (it ran,
// then the connection died) comes back in progress: the key is then given up.
func completeOnce(ctx context.Context, s *idemredis.Store, k idem.Key, failed *atomic.Int64) bool {
	for range 50 {
		res, err := s.Claim(ctx, idem.Claim{Key: k, Lease: 30 * time.Second})
		if err != nil {
			failed.Add(1)
			if ctx.Err() != nil {
				return false
			}
			time.Sleep(20 * time.Millisecond)
			continue
		}
		if res.Outcome != idem.Acquired {
			return false
		}
		for range 50 {
			err := s.Complete(ctx, k, res.Token, []byte("r-"+k.ID))
			if err == nil {
				return true
			}
			if !idem.IsRetryable(err) || ctx.Err() != nil {
				return false
			}
			failed.Add(1)
			time.Sleep(20 * time.Millisecond)
		}
		return false
	}
	return false
}

// TestClusterFailoverLosesUnwaitedWrites shows what the package doc says a
// failover can lose, deterministically: the replica of a master is paused
// (SIGSTOP) and its replication link cut, as in a network partition, so nothing
// more reaches it; a Complete without WAIT then succeeds on the
// master alone, and a claim with WAIT is refused (ErrNotReplicated) although the
// master applied it. The master is killed and the paused replica, resumed, is
// promoted: the record completed with WAIT before the pause is there, the
// unwaited Complete and the refused claim are gone, and their keys can be claimed
// again.
func TestClusterFailoverLosesUnwaitedWrites(t *testing.T) {
	b := clusterSetup(t)
	b.client = failoverClient(t, b.cluster)
	waited := b.store(t, idemredis.Config{WaitReplicas: 1, WaitTimeout: 300 * time.Millisecond})
	async := b.store(t, idemredis.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	// Three keys on one master.
	victim := masterOf(t, ctx, b, waited.Key(idem.Key{Scope: "l", ID: "k0"}))
	var keys []idem.Key
	for i := 0; len(keys) < 3; i++ {
		k := idem.Key{Scope: "l", ID: fmt.Sprintf("k%d", i)}
		if masterOf(t, ctx, b, waited.Key(k)) == victim {
			keys = append(keys, k)
		}
	}
	kWaited, kAsync, kRefused := keys[0], keys[1], keys[2]
	replica, err := b.cluster.ReplicaOf(ctx, victim)
	if err != nil || replica < 0 {
		t.Fatalf("replica of node %d: %d, %v", victim, replica, err)
	}

	// With the replica live, a WAIT succeeds however long a loaded machine takes
	// to replicate: the setup waits up to 10 s (waited's 300 ms is for the refusal
	// below, which must come fast).
	patient := b.store(t, idemredis.Config{WaitReplicas: 1, WaitTimeout: 10 * time.Second})
	res := idemtestClaim(t, ctx, patient, kWaited)
	if err := patient.Complete(ctx, kWaited, res.Token, []byte("kept")); err != nil {
		t.Fatalf("waited Complete with a live replica: %v", err)
	}
	resume := pause(t, b.cluster, replica)
	cutReplicas(t, ctx, b.cluster, victim)
	res = idemtestClaim(t, ctx, async, kAsync)
	if err := async.Complete(ctx, kAsync, res.Token, []byte("lost")); err != nil {
		t.Fatalf("Complete without WAIT: %v", err)
	}
	_, err = waited.Claim(ctx, idem.Claim{Key: kRefused})
	if !errors.Is(err, idemredis.ErrNotReplicated) || !idem.IsRetryable(err) {
		t.Fatalf("claim with WAIT while the replica is paused = %v, want a retryable error wrapping ErrNotReplicated", err)
	}

	b.cluster.Kill(victim)
	resume()
	promoted, err := b.cluster.WaitMaster(ctx, b.client, waited.Key(kWaited), victim)
	if err != nil {
		t.Fatalf("no replica promoted for node %d's slots: %v", victim, err)
	}
	if promoted != replica {
		t.Fatalf("node %d promoted, want the replica %d", promoted, replica)
	}

	rec, err := async.Inspect(ctx, kWaited)
	if err != nil || rec.State != idem.StateCompleted || string(rec.Result) != "kept" {
		t.Errorf("record completed with WAIT before the failover: %+v, %v; want completed with result \"kept\"", rec, err)
	}
	for _, k := range []idem.Key{kAsync, kRefused} {
		if rec, err := async.Inspect(ctx, k); !errors.Is(err, idem.ErrNotFound) {
			t.Errorf("%v, written to the master alone, survived the failover (%+v, %v): "+
				"the package doc says it is lost; fix the doc or this test", k, rec, err)
		}
		if res, err := async.Claim(ctx, idem.Claim{Key: k}); err != nil || res.Outcome != idem.Acquired {
			t.Errorf("claim of %v after the failover = %+v, %v; want acquired (its record was lost)", k, res, err)
		}
	}
	restartHealthy(t, b.cluster, victim)
}

// idemtestClaim claims a fresh key and fails t unless it is acquired.
func idemtestClaim(t *testing.T, ctx context.Context, s idem.Store, k idem.Key) idem.Result {
	t.Helper()
	res, err := s.Claim(ctx, idem.Claim{Key: k})
	if err != nil || res.Outcome != idem.Acquired {
		t.Fatalf("claim %v = %+v, %v; want acquired", k, res, err)
	}
	return res
}

// TestClusterRetriedCompleteWaitsAgain: a Complete whose WAIT fell short (the
// replica is paused) and that is retried, on another client and so another
// connection, is not acknowledged until the replica has the record: the retry
// writes the completed record again, so its WAIT has something to wait for.
func TestClusterRetriedCompleteWaitsAgain(t *testing.T) {
	b := clusterSetup(t)
	cfg := idemredis.Config{WaitReplicas: 1, WaitTimeout: 200 * time.Millisecond}
	first := b.store(t, cfg)
	ctx := ctxFor(t)
	k := idem.Key{Scope: "r", ID: "retried"}
	replica, err := b.cluster.ReplicaOf(ctx, masterOf(t, ctx, b, first.Key(k)))
	if err != nil || replica < 0 {
		t.Fatalf("replica: %d, %v", replica, err)
	}
	// The claim is the setup, not the subject: it may wait as long as a loaded
	// machine needs for the replica's ack (200 ms was not always enough in CI).
	patient := b.store(t, idemredis.Config{WaitReplicas: 1, WaitTimeout: 10 * time.Second})
	res := idemtestClaim(t, ctx, patient, k)
	resume := pause(t, b.cluster, replica)
	if err := first.Complete(ctx, k, res.Token, []byte("r")); !errors.Is(err, idemredis.ErrNotReplicated) {
		t.Fatalf("Complete with the replica paused = %v, want ErrNotReplicated", err)
	}
	b2 := b
	b2.client = b.cluster.Client(t, nil)
	second := b2.store(t, cfg)
	if err := second.Complete(ctx, k, res.Token, []byte("r")); !errors.Is(err, idemredis.ErrNotReplicated) {
		t.Fatalf("retried Complete on a fresh connection with the replica paused = %v, want ErrNotReplicated", err)
	}
	resume()
	testsvc.Eventually(t, time.Minute, "the retried Complete to be acknowledged once the replica resumed", func() bool {
		return second.Complete(ctx, k, res.Token, []byte("r")) == nil
	})
	if err := b.cluster.WaitHealthy(ctx); err != nil {
		t.Fatal(err)
	}
}
