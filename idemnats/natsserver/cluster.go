package natsserver

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/idemhq/idem"
	"github.com/nats-io/nats-server/v2/server"
)

// ClusterConfig configures an embedded NATS cluster: several JetStream servers in
// this process, joined by routes on loopback ports. It is a test and proof
// harness (idem verify --broker nats-cluster:), not a deployment: one process
// holds every replica.
type ClusterConfig struct {
	// Nodes is the number of servers; 0 means 3. JetStream needs a majority of
	// them up to elect leaders, so 3 survives one node down.
	Nodes int
	// Dir holds one store directory per node (Dir/n0, Dir/n1, …). Required.
	Dir string
	// Name is the cluster's name; empty means "idem".
	Name string
	// MaxStore caps each node's JetStream file storage; 0 means the server default.
	MaxStore int64
	// ReadyTimeout bounds the wait for each node to accept connections and for
	// the cluster to elect its JetStream meta leader. 0 means DefaultReadyTimeout.
	ReadyTimeout time.Duration
	// Logger, if set, receives the servers' notices, warnings and errors.
	Logger *slog.Logger
}

func (cfg ClusterConfig) withDefaults() (ClusterConfig, error) {
	cfg.Nodes = cmp.Or(cfg.Nodes, 3)
	cfg.Name = cmp.Or(cfg.Name, "idem")
	cfg.ReadyTimeout = cmp.Or(cfg.ReadyTimeout, DefaultReadyTimeout)
	switch {
	case cfg.Dir == "":
		return cfg, &idem.InputError{Field: "ClusterConfig.Dir", Reason: "is empty",
			Fix: "set the directory the nodes' stores go in, such as a t.TempDir()"}
	case cfg.Nodes < 2 || cfg.Nodes > 9:
		return cfg, &idem.InputError{Field: "ClusterConfig.Nodes", Reason: fmt.Sprintf("is outside 2..9 (got %d)", cfg.Nodes),
			Fix: "use 0 for 3 nodes; a single node is StartServer"}
	case strings.ContainsAny(cfg.Name, " .*>\t\r\n"):
		return cfg, &idem.InputError{Field: "ClusterConfig.Name", Reason: fmt.Sprintf("contains a space, dot or wildcard (got %q)", cfg.Name),
			Fix: "use letters, digits, '-' and '_'"}
	}
	return cfg, checkNode("ClusterConfig", cfg.MaxStore, cfg.ReadyTimeout)
}

// Cluster is an embedded NATS cluster with JetStream on every node. Every route
// between two nodes goes through a link of the cluster's own (a loopback TCP
// forwarder), so a test can cut the routes between nodes while their client ports
// stay up: the partition a network failure makes. A node can be killed and
// restarted on its ports and store.
//
// Nodes advertise an address that accepts and drops every connection, so a
// node cut off from another never reaches it through an address gossiped by a
// third one: the routes are exactly the links, and a cut link holds.
type Cluster struct {
	cfg   ClusterConfig
	hole  *link      // the advertised address: accepts and closes
	links [][]*link  // links[i][j] carries the routes node i opens to node j
	nodes []*clNode  // by index
	mu    sync.Mutex // guards nodes[*].ns
}

// clNode is one node: its fixed ports and store survive Kill and Restart.
type clNode struct {
	name                string
	dir                 string
	clientPort, cluPort int
	ns                  *server.Server // nil while killed
	logs                *serverLog
}

// StartCluster starts cfg.Nodes servers and returns once each accepts connections
// and the cluster has a JetStream meta leader. The caller must call Shutdown.
func StartCluster(ctx context.Context, cfg ClusterConfig) (*Cluster, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	// The ports are picked free and released for the servers to take: another
	// process may take one in between. Then the whole cluster starts again on new
	// ports, with empty stores.
	for attempt := 1; ; attempt++ {
		c, err := startCluster(ctx, cfg)
		if err == nil || attempt == 3 || !strings.Contains(err.Error(), "address already in use") {
			return c, err
		}
		for i := range cfg.Nodes {
			if err := os.RemoveAll(filepath.Join(cfg.Dir, fmt.Sprintf("n%d", i))); err != nil {
				return nil, err
			}
		}
	}
}

func startCluster(ctx context.Context, cfg ClusterConfig) (*Cluster, error) {
	var err error
	c := &Cluster{cfg: cfg}
	ok := false
	defer func() {
		if !ok {
			c.Shutdown()
		}
	}()
	if c.hole, err = newLink(""); err != nil {
		return nil, c.fail("listen", err)
	}
	for i := range cfg.Nodes {
		n := &clNode{name: fmt.Sprintf("%s-n%d", cfg.Name, i), dir: filepath.Join(cfg.Dir, fmt.Sprintf("n%d", i))}
		if err := os.MkdirAll(n.dir, 0o700); err != nil {
			return nil, c.fail("store directory", err)
		}
		if n.clientPort, err = freePort(); err == nil {
			n.cluPort, err = freePort()
		}
		if err != nil {
			return nil, c.fail("pick ports", err)
		}
		c.nodes = append(c.nodes, n)
	}
	c.links = make([][]*link, cfg.Nodes)
	for i := range c.links {
		c.links[i] = make([]*link, cfg.Nodes)
		for j, to := range c.nodes {
			if i == j {
				continue
			}
			if c.links[i][j], err = newLink(net.JoinHostPort("127.0.0.1", strconv.Itoa(to.cluPort))); err != nil {
				return nil, c.fail("listen", err)
			}
		}
	}
	// Start every node before waiting for any: a node's JetStream waits for a
	// meta leader, which needs a majority of the nodes up.
	for i := range c.nodes {
		if err := c.start(i); err != nil {
			return nil, err
		}
	}
	for i := range c.nodes {
		if err := c.waitReady(ctx, i); err != nil {
			return nil, err
		}
	}
	if err := c.waitPeers(ctx); err != nil {
		return nil, err
	}
	ok = true
	return c, nil
}

// waitPeers waits until the JetStream meta leader counts every running node as an
// online peer: until then it places no replicated stream on them ("no suitable
// peers for placement, peer offline"), although each node is ready on its own.
func (c *Cluster) waitPeers(ctx context.Context) error {
	deadline := time.Now().Add(c.cfg.ReadyTimeout)
	for {
		running, online := 0, 0
		for i := range c.nodes {
			if ns := c.server(i); ns != nil {
				running++
				online = max(online, len(ns.JetStreamClusterPeers())) // only the meta leader answers
			}
		}
		if online >= running {
			return nil
		}
		why := ""
		switch {
		case ctx.Err() != nil:
			why = ctx.Err().Error()
		case time.Now().After(deadline):
			why = fmt.Sprintf("the meta leader saw %d of %d nodes online within %v", online, running, c.cfg.ReadyTimeout)
		}
		if why != "" {
			return &idem.BackendError{Backend: backend, Op: "start cluster", Err: errors.New(why)}
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (c *Cluster) fail(op string, err error) error {
	return &idem.BackendError{Backend: backend, Op: "start cluster", Err: fmt.Errorf("%s: %w", op, err)}
}

// options are node i's server options, built afresh for every start (the server
// keeps and changes the ones it is given).
func (c *Cluster) options(i int) *server.Options {
	n := c.nodes[i]
	var routes []string
	for j := range c.nodes {
		if j != i {
			routes = append(routes, "nats://"+c.links[i][j].addr())
		}
	}
	return &server.Options{
		ServerName:        n.name,
		Host:              "127.0.0.1",
		Port:              n.clientPort,
		JetStream:         true,
		StoreDir:          n.dir,
		JetStreamMaxStore: c.cfg.MaxStore,
		MaxPayload:        embeddedMaxPayload,
		NoSigs:            true,
		Cluster: server.ClusterOpts{
			Name:        c.cfg.Name,
			Host:        "127.0.0.1",
			Port:        n.cluPort,
			Advertise:   c.hole.addr(),
			NoAdvertise: true, // clients keep the URLs they were given
		},
		Routes: server.RoutesFromStr(strings.Join(routes, ",")),
	}
}

// start starts node i without waiting for it.
func (c *Cluster) start(i int) error {
	n := c.nodes[i]
	ns, err := server.NewServer(c.options(i))
	if err != nil {
		return &idem.BackendError{Backend: backend, Op: "start node", Err: fmt.Errorf("%s: %w", n.name, err)}
	}
	n.logs = &serverLog{log: c.cfg.Logger}
	if c.cfg.Logger != nil {
		n.logs.log = c.cfg.Logger.With("node", n.name)
	}
	ns.SetLoggerV2(n.logs, false, false, false)
	ns.Start()
	c.mu.Lock()
	n.ns = ns
	c.mu.Unlock()
	return nil
}

// waitReady waits for node i to accept connections with JetStream on and to
// know the meta leader.
func (c *Cluster) waitReady(ctx context.Context, i int) error {
	n := c.nodes[i]
	ns := c.server(i)
	deadline := time.Now().Add(c.cfg.ReadyTimeout)
	for {
		if ns != nil && ns.ReadyForConnections(50*time.Millisecond) && ns.JetStreamEnabled() && ns.JetStreamIsCurrent() {
			return nil
		}
		why := ""
		switch {
		case ns == nil:
			why = "it is killed"
		case n.logs.fatal() != "":
			why = n.logs.fatal()
		case ctx.Err() != nil:
			why = ctx.Err().Error()
		case time.Now().After(deadline):
			why = fmt.Sprintf("no JetStream meta leader within %v", c.cfg.ReadyTimeout)
		}
		if why != "" {
			return &idem.BackendError{Backend: backend, Op: "start node",
				Err: fmt.Errorf("%s on 127.0.0.1:%d, store %q: %s", n.name, n.clientPort, n.dir, why)}
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (c *Cluster) server(i int) *server.Server {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nodes[i].ns
}

// Nodes is the number of nodes.
func (c *Cluster) Nodes() int { return len(c.nodes) }

// NodeName is node i's server name, as JetStream reports a leader.
func (c *Cluster) NodeName(i int) string { return c.nodes[i].name }

// ClientURL is node i's client URL, such as nats://127.0.0.1:40123. It stays the
// same across Kill and Restart.
func (c *Cluster) ClientURL(i int) string {
	return "nats://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(c.nodes[i].clientPort))
}

// ClientURLs lists every node's client URL, comma-separated: the server list of
// nats.Connect, so a client reconnects to another node when its node goes.
func (c *Cluster) ClientURLs() string {
	urls := make([]string, len(c.nodes))
	for i := range c.nodes {
		urls[i] = c.ClientURL(i)
	}
	return strings.Join(urls, ",")
}

// Kill stops node i: its clients and routes are closed, and its store stays for
// Restart. Killing a killed node does nothing.
func (c *Cluster) Kill(i int) {
	c.mu.Lock()
	ns := c.nodes[i].ns
	c.nodes[i].ns = nil
	c.mu.Unlock()
	if ns != nil {
		ns.Shutdown()
		ns.WaitForShutdown()
	}
}

// Restart starts killed node i again on its ports and store, and returns once it
// accepts connections, has caught up with the meta leader and is counted online by
// it (so a replicated stream can be placed on it again). Restarting a
// running node does nothing.
func (c *Cluster) Restart(ctx context.Context, i int) error {
	if c.server(i) != nil {
		return nil
	}
	if err := c.start(i); err != nil {
		return err
	}
	if err := c.waitReady(ctx, i); err != nil {
		return err
	}
	return c.waitPeers(ctx)
}

// Running reports whether node i is up (not killed).
func (c *Cluster) Running(i int) bool { return c.server(i) != nil }

// StreamLeader is the index of the node leading stream (of the default account),
// or -1 while there is none (an election is under way, or the stream is unknown).
func (c *Cluster) StreamLeader(stream string) int {
	for i := range c.nodes {
		if ns := c.server(i); ns != nil && ns.JetStreamIsStreamLeader(server.DEFAULT_GLOBAL_ACCOUNT, stream) {
			return i
		}
	}
	return -1
}

// ConsumerLeader is the index of the node leading the durable consumer of
// stream, or -1 while there is none.
func (c *Cluster) ConsumerLeader(stream, durable string) int {
	for i := range c.nodes {
		if ns := c.server(i); ns != nil && ns.JetStreamIsConsumerLeader(server.DEFAULT_GLOBAL_ACCOUNT, stream, durable) {
			return i
		}
	}
	return -1
}

// CutRoutes cuts the routes between nodes i and j: their connections close and
// neither can reach the other until down has passed, while both still reach the
// other nodes and their clients. CutRoutes returns when the routes may come back.
func (c *Cluster) CutRoutes(i, j int, down time.Duration) {
	if i == j {
		return
	}
	c.cutLinks(down, c.links[i][j], c.links[j][i])
}

// Isolate cuts every route of node i for down: the node keeps serving its
// clients but is a minority of one, so it leads nothing until the routes return.
func (c *Cluster) Isolate(i int, down time.Duration) {
	var ls []*link
	for j := range c.nodes {
		if j != i {
			ls = append(ls, c.links[i][j], c.links[j][i])
		}
	}
	c.cutLinks(down, ls...)
}

func (c *Cluster) cutLinks(down time.Duration, ls ...*link) {
	for _, l := range ls {
		l.cut(true)
	}
	time.Sleep(down)
	for _, l := range ls {
		l.cut(false)
	}
}

// Shutdown stops every node and link. Calling it again does nothing.
func (c *Cluster) Shutdown() {
	for i := range c.nodes {
		c.Kill(i)
	}
	for _, row := range c.links {
		for _, l := range row {
			if l != nil {
				l.close()
			}
		}
	}
	if c.hole != nil {
		c.hole.close()
	}
}

// freePort asks the kernel for a free loopback port. Another process could take it
// before the node binds it; on loopback in a test run that is rare, and the
// node's start then fails with the port named.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
