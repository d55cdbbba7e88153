package stream_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/idemhq/idem/internal/sqltest"
	"github.com/idemhq/idem/stream"
)

// A client whose hello says "batch" gets the events waiting for it several to a
// frame ("events"), in seq order; a client that does not (an older one) gets one
// "event" frame each, as before.
func TestEventsFrames(t *testing.T) {
	t.Parallel()
	f := newFixture(t, sqltest.SQLite(t), stream.ServerConfig{AllowAnonymous: true})
	appendN(t, f.srv, "c", 40)
	for _, batch := range []bool{false, true} {
		hello := `{"type":"hello","channel":"c","since":0,"client":"x"}`
		if batch {
			hello = `{"type":"hello","channel":"c","since":0,"client":"y","batch":true}`
		}
		ws := dial(t, f, hello, nil)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		var seqs []uint64
		frames, multi := 0, 0
		for len(seqs) < 40 {
			_, data, err := ws.Read(ctx)
			if err != nil {
				t.Fatalf("batch %v: after %d events: %v", batch, len(seqs), err)
			}
			var w struct {
				Type   string         `json:"type"`
				Event  *stream.Event  `json:"event"`
				Events []stream.Event `json:"events"`
			}
			if err := json.Unmarshal(data, &w); err != nil {
				t.Fatalf("frame %s: %v", data, err)
			}
			switch w.Type {
			case "event":
				frames++
				seqs = append(seqs, w.Event.Seq)
			case "events":
				if !batch {
					t.Fatalf("a client without batch in its hello got %s", data)
				}
				frames++
				multi++
				if len(w.Events) < 2 {
					t.Fatalf("an events frame of %d events", len(w.Events))
				}
				for _, e := range w.Events {
					seqs = append(seqs, e.Seq)
				}
			}
		}
		cancel()
		for i, seq := range seqs {
			if seq != uint64(i+1) {
				t.Fatalf("batch %v: seqs %v, want 1-40 in order", batch, seqs)
			}
		}
		if batch && (multi == 0 || frames >= 40) {
			t.Fatalf("40 waiting events came in %d frames (%d events frames): not batched", frames, multi)
		}
	}
}
