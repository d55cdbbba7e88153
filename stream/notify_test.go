package stream_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemhq/idem/internal/sqltest"
	"github.com/idemhq/idem/internal/testsvc"
	"github.com/idemhq/idem/stream"
	"github.com/idemhq/idem/stream/streamtest"
)

// readCounter is a Store that counts its Reads.
type readCounter struct {
	stream.Store
	reads atomic.Int64
}

func (r *readCounter) Read(ctx context.Context, channel string, after uint64, n int) ([]stream.Event, error) {
	r.reads.Add(1)
	return r.Store.Read(ctx, channel, after, n)
}

// Events committed together are notified in any order. A connected client gets
// them all, in seq order, from memory: no store read for an event whose Notify
// comes after a higher one's. A seq that is committed and never notified (its
// appender gone) reaches the client too, from the store, once the gap has waited.
func TestNotifyOutOfOrder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	sql := sqlStore(t, sqltest.SQLite(t))
	store := &readCounter{Store: sql}
	f := serve(t, store, stream.ServerConfig{AllowAnonymous: true})
	rec := &streamtest.Recorder{}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	c, _ := stream.NewClient(stream.ClientConfig{URL: f.http.URL, Channel: "c", ID: "r", OnEvent: rec.OnEvent})
	go func() { _ = c.Run(runCtx) }()
	first, err := f.srv.Append(ctx, "c", stream.Event{Type: "t", ID: "o"})
	if err != nil {
		t.Fatal(err)
	}
	testsvc.Eventually(t, time.Minute, "the first event", func() bool { return len(rec.Seqs()) == 1 })
	readsBefore := store.reads.Load()

	// Seqs 2..9 committed, notified 9 first, then 8, ..., then 2.
	var events []stream.Event
	for range 8 {
		e, err := sql.Append(ctx, "c", stream.Event{Type: "t", ID: "o"})
		if err != nil {
			t.Fatal(err)
		}
		events = append(events, e)
	}
	for i := len(events) - 1; i >= 0; i-- {
		f.srv.Notify("c", events[i])
		time.Sleep(time.Millisecond) // room for a woken client to look, as it would between real notifies
	}
	testsvc.Eventually(t, time.Minute, "seqs 1-9", func() bool { return len(rec.Seqs()) == 9 })
	for i, seq := range rec.Seqs() {
		if seq != first.Seq+uint64(i) {
			t.Fatalf("client got seqs %v, want 1-9 in order", rec.Seqs())
		}
	}
	if n := store.reads.Load() - readsBefore; n != 0 {
		t.Fatalf("%d store reads for events notified out of order, want none", n)
	}

	// Seq 10 is committed and never notified; seq 11 is.
	if _, err := sql.Append(ctx, "c", stream.Event{Type: "t", ID: "lost notify"}); err != nil {
		t.Fatal(err)
	}
	e11, err := sql.Append(ctx, "c", stream.Event{Type: "t", ID: "o"})
	if err != nil {
		t.Fatal(err)
	}
	f.srv.Notify("c", e11)
	testsvc.Eventually(t, time.Minute, "seqs 10 and 11", func() bool { return len(rec.Seqs()) == 11 })
	if got := rec.Seqs(); got[9] != 10 || got[10] != 11 {
		t.Fatalf("client got seqs %v, want 10 then 11 last", got)
	}
}
