package admin

import (
	"context"
	"net/http"
	"time"
)

// Stream is the stream server's area.
type Stream interface {
	Status(ctx context.Context) (StreamStatus, error)
}

// StreamStatus lists the channels and the connected clients.
type StreamStatus struct {
	Channels []StreamChannel `json:"channels"`
	Clients  []StreamClient  `json:"clients"`
	// TotalChannels and TotalClients count them all, where the backend lists only
	// some (0: the lists are complete).
	TotalChannels int `json:"total_channels,omitempty"`
	TotalClients  int `json:"total_clients,omitempty"`
}

// StreamChannel is one channel and the seq of its last event.
type StreamChannel struct {
	Name    string `json:"name"`
	LastSeq uint64 `json:"last_seq"`
	Clients int    `json:"clients"` // connected to it
}

// StreamClient is one connected client: how far it acknowledged, and how far
// behind the channel's last seq that is.
type StreamClient struct {
	ID          string    `json:"id"`
	Channel     string    `json:"channel"`
	SentSeq     uint64    `json:"sent_seq"` // the last seq written to it
	AckedSeq    uint64    `json:"acked_seq"`
	Lag         uint64    `json:"lag"`
	ConnectedAt time.Time `json:"connected_at,omitzero"`
}

func serveStream(h *handler, r *http.Request, c *call) (any, error) {
	st, err := h.cfg.Stream.Status(r.Context())
	if st.Channels == nil {
		st.Channels = []StreamChannel{}
	}
	if st.Clients == nil {
		st.Clients = []StreamClient{}
	}
	return st, err
}
