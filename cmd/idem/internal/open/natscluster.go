package open

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/idemhq/idem/cmd/idem/internal/verify"
	"github.com/idemhq/idem/idemnats"
	"github.com/idemhq/idem/idemnats/natsserver"
)

// openNATSClusterBroker is verify's --broker nats-cluster: three embedded NATS
// servers in this process, joined by routes on loopback ports, with the run's
// stream replicated on all three. Clients connect to every node (node 0 through
// a chaos.Proxy, so broker cuts still apply) and move to another when theirs is
// killed. The run kills and restarts nodes and cuts routes between them
// (verify.NodeFaulter).
func openNATSClusterBroker(ctx context.Context, b *Broker, raw, run string, logger *slog.Logger) error {
	if _, rest, _ := strings.Cut(raw, ":"); rest != "" {
		return fmt.Errorf("--broker %q: nats-cluster: takes no address (it starts its own three nodes); for a cluster of yours, use nats://host:4222", raw)
	}
	dir, err := os.MkdirTemp("", "idem-verify-natscluster-")
	if err != nil {
		return err
	}
	b.cleanup = append(b.cleanup, func() { os.RemoveAll(dir) })
	c, err := natsserver.StartCluster(ctx, natsserver.ClusterConfig{Dir: dir, Logger: quietServers(logger)})
	if err != nil {
		return fmt.Errorf("--broker nats-cluster: start the embedded cluster: %w", err)
	}
	b.cleanup = append(b.cleanup, c.Shutdown)
	b.name = fmt.Sprintf("nats-cluster (%d embedded nodes, R3)", c.Nodes())
	u, _ := url.Parse(c.ClientURL(0))
	if err := b.proxyTo("nats", u.Host); err != nil {
		return err
	}
	servers := []string{"nats://" + b.proxy.Addr()}
	for i := 1; i < c.Nodes(); i++ {
		servers = append(servers, c.ClientURL(i))
	}
	connect := verifyNATSConnect(strings.Join(servers, ","), raw, logger)
	js, stream, err := b.natsConnect(connect, run)
	if err != nil {
		return err
	}
	st, err := idemnats.EnsureStream(ctx, js, idemnats.StreamConfig{Name: stream, Subjects: []string{b.topic}, Replicas: c.Nodes()})
	if err != nil {
		return fmt.Errorf("--broker %s: %w", raw, err)
	}
	b.stored = func(ctx context.Context) (int, bool) {
		info, err := st.Info(ctx)
		if err != nil {
			return 0, false
		}
		return int(info.State.Msgs), true
	}
	b.natsOpeners(connect, stream)
	b.nodes = &natsNodeFaults{c: c, stream: stream}
	return nil
}

// quietServers passes the cluster's warnings and errors on; its notices (a
// route closed, a leader elected) are the faults themselves, logged at Info.
func quietServers(logger *slog.Logger) *slog.Logger {
	if logger == nil || !logger.Enabled(context.Background(), slog.LevelWarn) {
		return nil
	}
	return logger
}

// natsNodeFaults is the verify.NodeFaulter of an embedded cluster.
type natsNodeFaults struct {
	c      *natsserver.Cluster
	stream string
}

var _ verify.NodeFaulter = (*natsNodeFaults)(nil)

// node is the stream's leader when leader and there is one, else a random node.
func (f *natsNodeFaults) node(leader bool) int {
	if leader {
		if i := f.c.StreamLeader(f.stream); i >= 0 {
			return i
		}
	}
	return rand.IntN(f.c.Nodes())
}

func (f *natsNodeFaults) KillNode(ctx context.Context, leader bool, down time.Duration) error {
	i := f.node(leader)
	f.c.Kill(i)
	time.Sleep(down)
	if err := f.c.Restart(context.WithoutCancel(ctx), i); err != nil {
		return fmt.Errorf("restart %s: %w", f.c.NodeName(i), err)
	}
	return nil
}

func (f *natsNodeFaults) CutRoutes(_ context.Context, leader bool, down time.Duration) error {
	i := f.node(leader)
	if leader {
		f.c.Isolate(i, down)
		return nil
	}
	f.c.CutRoutes(i, (i+1)%f.c.Nodes(), down)
	return nil
}
