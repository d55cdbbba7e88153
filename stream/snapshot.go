package stream

import (
	"cmp"
	"slices"
)

// MaxSnapshotClients is how many clients (and channels) a Snapshot lists at most;
// its totals count them all.
const MaxSnapshotClients = 1000

// StreamStatus is the operator's view of a Server's live state: what its metrics
// sum up (idem_stream_clients, idem_stream_unacked), per channel and per client.
type StreamStatus struct {
	// Channels are the channels with connected clients, by name, at most
	// MaxSnapshotClients of them; TotalChannels counts them all.
	Channels      []ChannelStatus
	TotalChannels int
	// Clients are the connected clients, the most lagging first, at most
	// MaxSnapshotClients of them; TotalClients counts them all.
	Clients      []ClientStatus
	TotalClients int
}

// ChannelStatus is one channel of a StreamStatus.
type ChannelStatus struct {
	Name string
	// LastSeq is the highest seq the server knows on the channel.
	LastSeq uint64
	Clients int
}

// ClientStatus is one connected client of a StreamStatus.
type ClientStatus struct {
	Channel string
	// ID is the client's ack row: its client id, prefixed by its principal when
	// ServerConfig.Principal is set.
	ID string
	// Sent is the last seq written to it, Acked the last it acknowledged.
	Sent, Acked uint64
	// Lag is the channel's LastSeq minus Acked: events it has not confirmed.
	Lag uint64
}

// Snapshot returns the server's channels and connected clients with their acks
// and lag. It reads memory only (no store query), holding each lock just long
// enough to copy a few fields, so appends and acks are not held up while it sorts.
func (s *Server) Snapshot() StreamStatus {
	type chanRef struct {
		name string
		ch   *channel
	}
	s.mu.Lock()
	refs := make([]chanRef, 0, len(s.channels))
	for name, ch := range s.channels {
		refs = append(refs, chanRef{name, ch})
	}
	s.mu.Unlock()

	var st StreamStatus
	var clients []*client
	for _, r := range refs {
		r.ch.mu.Lock()
		last := r.ch.max
		clients = clients[:0]
		for c := range r.ch.clients {
			clients = append(clients, c)
		}
		r.ch.mu.Unlock()
		st.Channels = append(st.Channels, ChannelStatus{Name: r.name, LastSeq: last, Clients: len(clients)})
		for _, c := range clients {
			c.mu.Lock()
			cs := ClientStatus{Channel: r.name, ID: c.id, Sent: c.sent, Acked: c.acked}
			c.mu.Unlock()
			if last > cs.Acked {
				cs.Lag = last - cs.Acked
			}
			st.Clients = append(st.Clients, cs)
		}
	}
	slices.SortFunc(st.Channels, func(a, b ChannelStatus) int { return cmp.Compare(a.Name, b.Name) })
	slices.SortFunc(st.Clients, func(a, b ClientStatus) int {
		return cmp.Or(cmp.Compare(b.Lag, a.Lag), cmp.Compare(a.Channel, b.Channel), cmp.Compare(a.ID, b.ID))
	})
	st.TotalChannels, st.TotalClients = len(st.Channels), len(st.Clients)
	st.Channels = st.Channels[:min(len(st.Channels), MaxSnapshotClients)]
	st.Clients = st.Clients[:min(len(st.Clients), MaxSnapshotClients)]
	return st
}
