package verify

import (
	"context"
	"time"
)

// Faults of a broker with several nodes (a NATS JetStream cluster), injected in
// the background while the clients place orders, one at a time.
const (
	// FaultNodeKill: a broker node is killed and restarted on its store a moment
	// later; every other kill is of the stream's leader.
	FaultNodeKill = "broker_node_kill"
	// FaultRouteCut: the routes between broker nodes are cut, then restored; every
	// other cut isolates the stream's leader from the other nodes.
	FaultRouteCut = "broker_route_cut"
)

// NodeFaulter kills broker nodes and cuts the routes between them.
type NodeFaulter interface {
	// KillNode kills a node (the leader of the run's stream when leader) and
	// restarts it after down. It returns once the node is back.
	KillNode(ctx context.Context, leader bool, down time.Duration) error
	// CutRoutes cuts the routes of the stream leader to every other node when
	// leader, else between two nodes, and restores them after down.
	CutRoutes(ctx context.Context, leader bool, down time.Duration) error
}

// ClusteredBroker is implemented by a Broker that may have several nodes.
// NodeFaults is nil when it has one.
type ClusteredBroker interface {
	NodeFaults() NodeFaulter
}

// nodeFaultEvery is the pause between two node faults: long enough for the
// cluster to elect leaders and the flow to make progress in between.
const nodeFaultEvery = 1500 * time.Millisecond

// minNodeFaults is how many node faults every run gets, however short: each of
// the four kinds (the leader killed, the leader isolated, a node killed, two
// nodes cut apart) once.
const minNodeFaults = 4

// nodeFaults kills nodes and cuts routes in turn, when the broker has nodes and
// the run injects faults, until ctx ends or every order is placed and each kind
// of node fault happened.
func (r *run) nodeFaults(ctx context.Context) {
	cb, ok := r.f.Broker.(ClusteredBroker)
	if !ok || r.f.FaultRate <= 0 {
		return
	}
	nf := cb.NodeFaults()
	if nf == nil {
		return
	}
	t := time.NewTimer(nodeFaultEvery / 4) // the first soon: a short run gets them all
	defer t.Stop()
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		t.Reset(nodeFaultEvery)
		if i >= minNodeFaults && r.placed.Load() >= int64(r.f.Orders) {
			return
		}
		kind, leader := FaultNodeKill, i%4 < 2
		var err error
		if i%2 == 0 {
			err = nf.KillNode(ctx, leader, time.Second)
		} else {
			kind = FaultRouteCut
			err = nf.CutRoutes(ctx, leader, 2*time.Second)
		}
		if err != nil {
			r.log.Warn("verify: broker node fault", "fault", kind, "err", err)
			continue
		}
		r.inj.Count(kind)
	}
}
