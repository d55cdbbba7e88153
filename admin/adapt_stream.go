package admin

import (
	"context"

	"github.com/idemhq/idem/stream"
)

// StreamFrom returns the Stream area of s: its channels and connected clients, as
// (*stream.Server).Snapshot reads them from memory (at most
// stream.MaxSnapshotClients of each, the most lagging clients first; the totals
// count them all).
func StreamFrom(s *stream.Server) Stream { return streamArea{s} }

type streamArea struct{ s *stream.Server }

func (a streamArea) Status(ctx context.Context) (StreamStatus, error) {
	if err := ctx.Err(); err != nil {
		return StreamStatus{}, err
	}
	return streamStatusOf(a.s.Snapshot()), nil
}

func streamStatusOf(snap stream.StreamStatus) StreamStatus {
	st := StreamStatus{Channels: make([]StreamChannel, 0, len(snap.Channels)), Clients: make([]StreamClient, 0, len(snap.Clients)),
		TotalChannels: snap.TotalChannels, TotalClients: snap.TotalClients}
	for _, c := range snap.Channels {
		st.Channels = append(st.Channels, StreamChannel{Name: c.Name, LastSeq: c.LastSeq, Clients: c.Clients})
	}
	for _, c := range snap.Clients {
		st.Clients = append(st.Clients, StreamClient{ID: c.ID, Channel: c.Channel, SentSeq: c.Sent, AckedSeq: c.Acked, Lag: c.Lag})
	}
	return st
}
