package stream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
)

// GET /events?channel=C&since=N&limit=L
func (s *Server) serveEvents(w http.ResponseWriter, r *http.Request) {
	if err := s.checkOrigin(r); err != nil {
		problem(w, http.StatusForbidden, err.Error())
		return
	}
	q, err := parseEventsQuery(r.URL.Query())
	if err != nil {
		problem(w, http.StatusBadRequest, err.Error())
		return
	}
	channelName, since := q.Channel, q.Since
	if status, _, err := s.check(r, channelName); err != nil {
		problem(w, status, "channel: "+err.Error())
		return
	}
	head, err := s.store.Head(r.Context(), channelName)
	if err != nil {
		problem(w, http.StatusServiceUnavailable, err.Error())
		return
	}
	if since > head {
		problem(w, http.StatusBadRequest, fmt.Sprintf("since %d is past the channel's head %d: pass the last seq the client processed", since, head))
		return
	}
	events, err := s.readPage(r.Context(), channelName, since, q.Limit)
	if errors.Is(err, ErrTrimmed) {
		problem(w, http.StatusGone, fmt.Sprintf("events after seq %d were trimmed: reload the state and start from the head", since))
		return
	}
	if err != nil {
		problem(w, http.StatusServiceUnavailable, err.Error())
		return
	}
	if n := len(events); n > 0 {
		head = max(head, events[n-1].Seq)
	}
	if events == nil {
		events = []Event{}
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"channel": channelName, "head": head, "events": events})
}

// Bounds of one GET /events answer: it is read from the store in chunks of
// eventsChunk events and ends after the chunk that reaches eventsBytes of
// event data, so a request for 10000 large events does not hold them all. The
// clients ask again from the last seq they got.
const (
	eventsChunk = 100
	eventsBytes = 4 << 20
)

// readPage reads up to limit events after since, in chunks, stopping early
// once eventsBytes of data are read.
func (s *Server) readPage(ctx context.Context, name string, since uint64, limit int) ([]Event, error) {
	var out []Event
	size := 0
	for len(out) < limit && size < eventsBytes {
		want := min(limit-len(out), eventsChunk)
		page, err := s.store.Read(ctx, name, since, want)
		if err != nil {
			if len(out) > 0 { // trimmed or failed after the first chunk: send what was read
				return out, nil
			}
			return nil, err
		}
		for _, e := range page {
			out = append(out, e)
			size += len(e.Data) + len(e.Type) + len(e.ID)
		}
		if len(page) < want {
			break
		}
		since = page[len(page)-1].Seq
	}
	return out, nil
}

func problem(w http.ResponseWriter, status int, detail string) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"type": "about:blank", "title": http.StatusText(status), "status": status, "detail": detail})
}
