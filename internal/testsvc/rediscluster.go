package testsvc

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisClusterNodeTimeout is the cluster-node-timeout of the test cluster: after a
// master has been unreachable this long, its replica is promoted. It is short so a
// failover takes seconds, and long enough that a busy two-core machine does not
// fail over a healthy node.
const RedisClusterNodeTimeout = 3 * time.Second

// redisClusterWait bounds every wait of the helper (start, cluster_state:ok,
// failover, resync): generous, since nothing is asserted about how long it takes.
const redisClusterWait = 90 * time.Second

// RedisCluster is a real Redis Cluster of six redis-server processes on loopback
// ports: three masters with one replica each, in temporary directories, with no
// persistence. One is started per test binary (see StartRedisCluster); tests that
// kill or pause nodes must not run in parallel with the other users of it, and must
// leave it healthy (Restart, then WaitHealthy).
type RedisCluster struct {
	mu    sync.Mutex
	nodes []*redisNode
}

type redisNode struct {
	port, busPort int
	dir           string
	cmd           *exec.Cmd
	done          chan struct{} // closed when cmd has exited
}

func (n *redisNode) addr() string { return "127.0.0.1:" + strconv.Itoa(n.port) }

var (
	clusterOnce sync.Once
	cluster     *RedisCluster
	clusterErr  error
)

// StartRedisCluster returns the test binary's Redis Cluster, starting it on first
// use. It skips t (fails it under IDEM_REQUIRE_SERVICES=1) when redis-server or
// redis-cli is not installed; a cluster that was found but would not form fails t.
// Call StopRedisCluster from TestMain to end the processes; on Linux they also die
// with the test binary.
func StartRedisCluster(t testing.TB) *RedisCluster {
	t.Helper()
	for _, bin := range []string{"redis-server", "redis-cli"} {
		if _, err := exec.LookPath(bin); err != nil {
			msg := fmt.Sprintf("%s not installed (%v); install it with scripts/services.sh", bin, err)
			if Required() {
				t.Fatal(msg)
			}
			t.Skip(msg)
		}
	}
	clusterOnce.Do(func() { cluster, clusterErr = startRedisCluster() })
	if clusterErr != nil {
		t.Fatalf("redis cluster: %v", clusterErr)
	}
	return cluster
}

// StopRedisCluster kills the processes of the cluster and of PrivateRedis, those
// that were started, and removes their directories.
func StopRedisCluster() {
	if private != nil {
		private.kill()
		os.RemoveAll(private.dir)
	}
	if cluster == nil {
		return
	}
	cluster.mu.Lock()
	defer cluster.mu.Unlock()
	for _, n := range cluster.nodes {
		n.kill()
		os.RemoveAll(n.dir)
	}
}

var (
	privateOnce sync.Once
	private     *redisNode
	privateErr  error
)

// PrivateRedis returns the address of a single redis-server process of the test
// binary's own, started on first use (and stopped by StopRedisCluster). Tests whose
// bounds depend on the size of the keyspace use it: a SCAN walks every key of the
// shared Redis, which other test binaries fill while they run.
func PrivateRedis(t testing.TB) string {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		msg := fmt.Sprintf("redis-server not installed (%v); install it with scripts/services.sh", err)
		if Required() {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	privateOnce.Do(func() { private, privateErr = startPrivateRedis() })
	if privateErr != nil {
		t.Fatalf("private redis: %v", privateErr)
	}
	return private.addr()
}

func startPrivateRedis() (_ *redisNode, err error) {
	removeStaleClusterDirs()
	ports, err := freePorts(1)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "idem-rediscluster-")
	if err != nil {
		return nil, err
	}
	n := &redisNode{port: ports[0], dir: dir}
	defer func() {
		if err != nil {
			n.kill()
			os.RemoveAll(dir)
		}
	}()
	if err := os.WriteFile(filepath.Join(dir, "owner"), []byte(strconv.Itoa(os.Getpid())), 0o600); err != nil {
		return nil, err
	}
	if err := n.start(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), redisClusterWait)
	defer cancel()
	return n, n.waitPing(ctx)
}

func startRedisCluster() (_ *RedisCluster, err error) {
	ports, err := freePorts(12)
	if err != nil {
		return nil, err
	}
	removeStaleClusterDirs()
	c := &RedisCluster{}
	defer func() {
		if err != nil {
			for _, n := range c.nodes {
				n.kill()
				os.RemoveAll(n.dir)
			}
		}
	}()
	for i := range 6 {
		dir, err := os.MkdirTemp("", "idem-rediscluster-")
		if err != nil {
			return nil, err
		}
		if err := os.WriteFile(filepath.Join(dir, "owner"), []byte(strconv.Itoa(os.Getpid())), 0o600); err != nil {
			return nil, err
		}
		n := &redisNode{port: ports[2*i], busPort: ports[2*i+1], dir: dir}
		c.nodes = append(c.nodes, n)
		if err := n.start(); err != nil {
			return c, err
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), redisClusterWait)
	defer cancel()
	args := []string{"--cluster", "create"}
	for _, n := range c.nodes {
		if err := n.waitPing(ctx); err != nil {
			return c, err
		}
		args = append(args, n.addr())
	}
	args = append(args, "--cluster-replicas", "1", "--cluster-yes")
	if out, err := exec.CommandContext(ctx, "redis-cli", args...).CombinedOutput(); err != nil {
		return c, fmt.Errorf("redis-cli --cluster create: %v\n%s", err, out)
	}
	return c, c.WaitHealthy(ctx)
}

// removeStaleClusterDirs removes the directories of clusters whose test binary is
// gone (a binary without TestMain never calls StopRedisCluster; its nodes died
// with it, their directories did not).
func removeStaleClusterDirs() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), "idem-rediscluster-*"))
	for _, d := range dirs {
		b, err := os.ReadFile(filepath.Join(d, "owner"))
		if err != nil {
			continue
		}
		pid, err := strconv.Atoi(string(b))
		if err != nil || pid <= 0 {
			continue
		}
		if p, err := os.FindProcess(pid); err == nil && p.Signal(syscall.Signal(0)) == nil {
			continue // its binary is still running
		}
		os.RemoveAll(d)
	}
}

// freePorts reserves n distinct free loopback ports (listening on all at once so
// none repeats) and releases them for the servers to take.
func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

func (n *redisNode) start() error {
	args := []string{
		"--bind", "127.0.0.1", "--port", strconv.Itoa(n.port), "--protected-mode", "no",
		"--dir", n.dir, "--logfile", "redis.log", "--daemonize", "no",
		"--save", "", "--appendonly", "no",
	}
	if n.busPort != 0 {
		args = append(args,
			"--cluster-enabled", "yes", "--cluster-port", strconv.Itoa(n.busPort),
			"--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", strconv.FormatInt(RedisClusterNodeTimeout.Milliseconds(), 10),
			// A replica may always be promoted, however long it was cut off: the
			// failover tests need a promotion whatever the replica's lag.
			"--cluster-replica-validity-factor", "0",
			// Slots of a live master keep serving while another master fails over.
			"--cluster-require-full-coverage", "no",
			"--repl-diskless-sync", "yes", "--repl-diskless-sync-delay", "0")
	}
	cmd := exec.Command("redis-server", args...)
	cmd.Dir = n.dir
	setPdeathsig(cmd)
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start redis-server on port %d: %w", n.port, err)
	}
	n.cmd, n.done = cmd, make(chan struct{})
	go func(done chan struct{}) { _ = cmd.Wait(); close(done) }(n.done)
	return nil
}

func (n *redisNode) kill() {
	if n.cmd == nil {
		return
	}
	_ = n.cmd.Process.Signal(syscall.SIGKILL)
	<-n.done
	n.cmd = nil
}

func (n *redisNode) waitPing(ctx context.Context) error {
	c := redis.NewClient(&redis.Options{Addr: n.addr(), MaxRetries: -1})
	defer c.Close()
	return pollUntil(ctx, func() error {
		select {
		case <-n.done:
			log, _ := os.ReadFile(filepath.Join(n.dir, "redis.log"))
			return errStop{fmt.Errorf("redis-server on port %d exited:\n%s", n.port, log)}
		default:
		}
		return c.Ping(ctx).Err()
	})
}

// errStop ends pollUntil at once.
type errStop struct{ error }

// pollUntil calls f every 100ms until it returns nil, an errStop, or ctx ends (then
// with f's last error).
func pollUntil(ctx context.Context, f func() error) error {
	for {
		err := f()
		var stop errStop
		if err == nil || errors.As(err, &stop) {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %v)", ctx.Err(), err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Addrs returns the addresses of the nodes that are running.
func (c *RedisCluster) Addrs() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, n := range c.nodes {
		if n.cmd != nil {
			out = append(out, n.addr())
		}
	}
	return out
}

// Client returns a cluster client on the cluster, closed when t ends.
func (c *RedisCluster) Client(t testing.TB, opt *redis.ClusterOptions) *redis.ClusterClient {
	t.Helper()
	if opt == nil {
		opt = &redis.ClusterOptions{}
	}
	opt.Addrs = c.Addrs()
	cc := redis.NewClusterClient(opt)
	t.Cleanup(func() { cc.Close() })
	return cc
}

// Addr returns the address of node i, running or not.
func (c *RedisCluster) Addr(i int) string { return c.nodes[i].addr() }

// Node returns the index of the node listening on addr, or -1.
func (c *RedisCluster) Node(addr string) int {
	for i, n := range c.nodes {
		if n.addr() == addr {
			return i
		}
	}
	return -1
}

// ReplicaOf returns the index of a running replica of the master at index i, or
// -1, as the cluster's live nodes see it.
func (c *RedisCluster) ReplicaOf(ctx context.Context, i int) (int, error) {
	nodes, err := c.clusterNodes(ctx)
	if err != nil {
		return -1, err
	}
	var masterID string
	for _, n := range nodes {
		if n.addr == c.nodes[i].addr() {
			masterID = n.id
		}
	}
	for _, n := range nodes {
		if n.masterID == masterID && masterID != "" && !n.failed {
			return c.Node(n.addr), nil
		}
	}
	return -1, nil
}

// Kill ends node i with SIGKILL: no shutdown, no last write to its replica.
func (c *RedisCluster) Kill(i int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.nodes[i].kill()
}

// Pause stops node i with SIGSTOP (it neither answers nor replicates) until Resume.
func (c *RedisCluster) Pause(i int) error {
	return c.nodes[i].cmd.Process.Signal(syscall.SIGSTOP)
}

// Resume continues node i after Pause.
func (c *RedisCluster) Resume(i int) error {
	return c.nodes[i].cmd.Process.Signal(syscall.SIGCONT)
}

// Restart starts node i again after Kill, on its old port and directory: it keeps
// its cluster identity (nodes.conf) but, without persistence, none of its data, and
// rejoins as a replica of whichever node took over its slots.
func (c *RedisCluster) Restart(ctx context.Context, i int) error {
	c.mu.Lock()
	n := c.nodes[i]
	err := n.start()
	c.mu.Unlock()
	if err != nil {
		return err
	}
	return n.waitPing(ctx)
}

// clusterNode is a line of CLUSTER NODES.
type clusterNode struct {
	id, addr, masterID string
	master, failed     bool
	slots              int
}

func (c *RedisCluster) clusterNodes(ctx context.Context) ([]clusterNode, error) {
	var lastErr error
	for _, addr := range c.Addrs() {
		rc := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
		text, err := rc.ClusterNodes(ctx).Result()
		rc.Close()
		if err != nil {
			lastErr = err
			continue
		}
		return parseClusterNodes(text), nil
	}
	return nil, fmt.Errorf("no node answered CLUSTER NODES: %v", lastErr)
}

func parseClusterNodes(text string) []clusterNode {
	var out []clusterNode
	for _, line := range strings.Split(strings.TrimSpace(text), "\n") {
		f := strings.Fields(line)
		if len(f) < 8 {
			continue
		}
		addr, _, _ := strings.Cut(f[1], "@")
		n := clusterNode{id: f[0], addr: addr, failed: strings.Contains(f[2], "fail")}
		n.master = strings.Contains(f[2], "master")
		if f[3] != "-" {
			n.masterID = f[3]
		}
		for _, r := range f[8:] {
			if strings.HasPrefix(r, "[") {
				continue // a slot being migrated
			}
			lo, hi, ok := strings.Cut(r, "-")
			a, _ := strconv.Atoi(lo)
			b := a
			if ok {
				b, _ = strconv.Atoi(hi)
			}
			n.slots += b - a + 1
		}
		out = append(out, n)
	}
	return out
}

// WaitHealthy waits until every running node reports cluster_state:ok with all
// 16384 slots ok, every node agrees that the running nodes are up, every master
// holding slots has a replica whose link to it is up, and no node is flagged fail.
func (c *RedisCluster) WaitHealthy(ctx context.Context) error {
	return pollUntil(ctx, func() error {
		addrs := c.Addrs()
		for _, addr := range addrs {
			rc := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
			info, err := rc.ClusterInfo(ctx).Result()
			if err == nil && !strings.Contains(info, "cluster_state:ok") {
				err = fmt.Errorf("%s: cluster_state not ok", addr)
			}
			if err == nil && !strings.Contains(info, "cluster_slots_ok:16384") {
				err = fmt.Errorf("%s: not all slots ok", addr)
			}
			var repl string
			if err == nil {
				repl, err = rc.Info(ctx, "replication").Result()
			}
			rc.Close()
			if err != nil {
				return err
			}
			if strings.Contains(repl, "role:slave") && !strings.Contains(repl, "master_link_status:up") {
				return fmt.Errorf("%s: replica link not up", addr)
			}
		}
		nodes, err := c.clusterNodes(ctx)
		if err != nil {
			return err
		}
		replicas := map[string]int{}
		for _, n := range nodes {
			if n.failed {
				return fmt.Errorf("node %s flagged fail", n.addr)
			}
			if n.masterID != "" {
				replicas[n.masterID]++
			}
		}
		for _, n := range nodes {
			if n.master && n.slots > 0 && replicas[n.id] == 0 {
				return fmt.Errorf("master %s has no replica", n.addr)
			}
		}
		return nil
	})
}

// WaitMaster waits until the cluster names a running node other than node i master
// of slot-holding node i's slots, that is until node i's replica was promoted, and
// returns the new master's index.
func (c *RedisCluster) WaitMaster(ctx context.Context, cc *redis.ClusterClient, key string, not int) (int, error) {
	idx := -1
	err := pollUntil(ctx, func() error {
		cc.ReloadState(ctx)
		m, err := cc.MasterForKey(ctx, key)
		if err != nil {
			return err
		}
		i := c.Node(m.Options().Addr)
		if i == not || i < 0 {
			return fmt.Errorf("key %q still on node %d", key, i)
		}
		if err := m.Ping(ctx).Err(); err != nil {
			return err
		}
		idx = i
		return nil
	})
	return idx, err
}
