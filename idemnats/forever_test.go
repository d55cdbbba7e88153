package idemnats_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemnats"
	"github.com/idemhq/idem/internal/testsvc"
	"github.com/nats-io/nats.go/jetstream"
)

// foreverStream creates a stream of its own for t capturing "<prefix>.>", with
// the given dedup mode and limits, deleted when t ends.
func foreverStream(t testing.TB, js jetstream.JetStream, cfg idemnats.StreamConfig) (stream, prefix string) {
	t.Helper()
	stream, prefix = testsvc.UniqueName("IDEMFOREVER_"), testsvc.UniqueName("forever.")
	cfg.Name, cfg.Subjects = stream, []string{prefix + ".>"}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := idemnats.EnsureStream(ctx, js, cfg); err != nil {
		t.Fatalf("EnsureStream: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = js.DeleteStream(ctx, stream)
	})
	return stream, prefix
}

func publishOne(t testing.TB, sink *idemnats.Sink, m idem.Message) bool {
	t.Helper()
	dup, err := sink.PublishOne(context.Background(), m)
	if err != nil {
		t.Fatalf("PublishOne %s: %v", m.ID, err)
	}
	return dup
}

// TestDedupForever: with a 200ms duplicate window, a republish after the window
// is stored again on a DedupWindow stream (the control: the window really
// passed), while a DedupForever stream refuses it, and the sink reports it as a
// duplicate, not an error, alone (PublishOne) or in pipelined and sequential
// batches (Publish). On the real server and on the embedded one.
func TestDedupForever(t *testing.T) {
	t.Parallel()
	for name, connectTo := range map[string]func(testing.TB) jetstream.JetStream{
		"server":   func(t testing.TB) jetstream.JetStream { _, js := connect(t); return js },
		"embedded": func(t testing.TB) jetstream.JetStream { _, js := embeddedJS(t); return js },
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			js := connectTo(t)
			window := 200 * time.Millisecond
			wStream, wPrefix := foreverStream(t, js, idemnats.StreamConfig{Duplicates: window, Storage: jetstream.MemoryStorage})
			fStream, fPrefix := foreverStream(t, js, idemnats.StreamConfig{Duplicates: window, Dedup: idemnats.DedupForever})
			wSink := newSink(t, js, idemnats.SinkConfig{})
			fSink := newSink(t, js, idemnats.SinkConfig{Dedup: idemnats.DedupForever})
			wMsg := idem.Message{ID: "order-17", Topic: wPrefix + ".orders", Payload: []byte("1")}
			fMsg := idem.Message{ID: "order-17", Topic: fPrefix + ".orders", Payload: []byte("1")}

			if publishOne(t, wSink, wMsg) || publishOne(t, fSink, fMsg) {
				t.Fatal("a first publish was reported as a duplicate")
			}
			if !publishOne(t, fSink, fMsg) {
				t.Fatal("a republish within the window was not reported as a duplicate")
			}
			testsvc.Eventually(t, time.Minute, "the window stream to store a republish after its window", func() bool {
				publishOne(t, wSink, wMsg)
				return streamMsgs(t, js, wStream) == 2
			})
			if !publishOne(t, fSink, fMsg) {
				t.Fatal("a republish after the duplicate window was not reported as a duplicate")
			}
			batch := hundred(fPrefix)
			for _, inFlight := range []int{0, 1} {
				sink := newSink(t, js, idemnats.SinkConfig{Dedup: idemnats.DedupForever, MaxInFlight: inFlight})
				for range 2 {
					publish(t, sink, batch...)
				}
			}
			time.Sleep(2 * window) // past the window again: only the per-subject limit can refuse now
			publish(t, fSink, batch...)
			if n := streamMsgs(t, js, fStream); n != 101 {
				t.Fatalf("the forever stream holds %d messages after 101 IDs were published 4 to 5 times, want 101", n)
			}
		})
	}
}

// TestDedupForeverIDs: IDs that are not subject tokens (dots, spaces, wildcards,
// a leading '~') get distinct subjects, each stored once and refused the second
// time; a consumer receives them with their IDs.
func TestDedupForeverIDs(t *testing.T) {
	t.Parallel()
	_, js := connect(t)
	stream, prefix := foreverStream(t, js, idemnats.StreamConfig{Dedup: idemnats.DedupForever})
	sink := newSink(t, js, idemnats.SinkConfig{Dedup: idemnats.DedupForever})
	ids := []string{"a", "a.b", "a b", "*", ">", "~a", "~YQ", "YQ", "ü", strings.Repeat("x", 255)}
	seen := make(map[string]string)
	for _, id := range ids {
		subj := idemnats.IDSubject(prefix+".t", id)
		if other, ok := seen[subj]; ok {
			t.Fatalf("IDs %q and %q share subject %q", id, other, subj)
		}
		seen[subj] = id
		m := idem.Message{ID: id, Topic: prefix + ".t", Payload: []byte(id)}
		if publishOne(t, sink, m) {
			t.Fatalf("first publish of %q reported as a duplicate", id)
		}
		if !publishOne(t, sink, m) {
			t.Fatalf("second publish of %q not reported as a duplicate", id)
		}
	}
	if n := streamMsgs(t, js, stream); n != uint64(len(ids)) {
		t.Fatalf("stream holds %d messages, want %d", n, len(ids))
	}
	src := openSource(t, js, idemnats.SourceConfig{Stream: stream, Durable: "d"})
	got := receiveN(t, src, len(ids))
	for i, d := range got {
		if d.ID != ids[i] || d.Topic != idemnats.IDSubject(prefix+".t", ids[i]) {
			t.Errorf("delivery %d: ID %q topic %q, want %q on %q", i, d.ID, d.Topic, ids[i], idemnats.IDSubject(prefix+".t", ids[i]))
		}
	}
	ackAll(t, got...)
}

// TestDedupForeverWrongStream: a DedupForever sink refuses to publish onto a
// stream that would store a second copy, naming the setting; VerifyForeverStream
// names each missing setting.
func TestDedupForeverWrongStream(t *testing.T) {
	t.Parallel()
	_, js := connect(t)
	_, prefix := foreverStream(t, js, idemnats.StreamConfig{})
	sink := newSink(t, js, idemnats.SinkConfig{Dedup: idemnats.DedupForever})
	err := sink.Publish(context.Background(), idem.Message{ID: "x", Topic: prefix + ".t", Payload: []byte("x")})
	if !errors.Is(err, idemnats.ErrNotForeverStream) || !strings.Contains(err.Error(), "discard is old") {
		t.Fatalf("Publish onto a window stream: %v, want ErrNotForeverStream naming discard", err)
	}
	ctx := context.Background()
	for want, sc := range map[string]jetstream.StreamConfig{
		"discard_new_per_subject": {Discard: jetstream.DiscardNew, MaxMsgsPerSubject: 1},
		"max_msgs_per_subject":    {Discard: jetstream.DiscardNew, DiscardNewPerSubject: true, MaxMsgsPerSubject: 2},
		"retention":               {Discard: jetstream.DiscardNew, DiscardNewPerSubject: true, MaxMsgsPerSubject: 1, Retention: jetstream.WorkQueuePolicy},
	} {
		sc.Name = testsvc.UniqueName("IDEMWRONG_")
		sc.Subjects = []string{testsvc.UniqueName("wrong.") + ".>"}
		if _, err := js.CreateStream(ctx, sc); err != nil {
			t.Fatalf("%s: CreateStream: %v", want, err)
		}
		t.Cleanup(func() { _ = js.DeleteStream(context.Background(), sc.Name) })
		if err := idemnats.VerifyForeverStream(ctx, js, sc.Name); !errors.Is(err, idemnats.ErrNotForeverStream) || !strings.Contains(err.Error(), want) {
			t.Errorf("VerifyForeverStream: %v, want ErrNotForeverStream naming %s", err, want)
		}
	}
	if err := idemnats.VerifyForeverStream(ctx, js, "IDEM_NO_SUCH_STREAM"); errors.Is(err, idemnats.ErrNotForeverStream) || err == nil {
		t.Errorf("VerifyForeverStream of a missing stream: %v, want a backend error", err)
	}
	if _, err := idemnats.NewSink(js, idemnats.SinkConfig{Dedup: 7}); !errors.Is(err, idem.ErrInvalid) {
		t.Errorf("NewSink with Dedup 7: %v, want an input error", err)
	}
}

// TestDedupForeverLimits: at MaxMsgs a new ID is refused with an error (the
// stream does not drop old messages, which would free their IDs) while a known
// ID is still a duplicate; once MaxAge removes a message, its ID may be
// published again.
func TestDedupForeverLimits(t *testing.T) {
	t.Parallel()
	_, js := connect(t)
	_, prefix := foreverStream(t, js, idemnats.StreamConfig{Dedup: idemnats.DedupForever, MaxMsgs: 3})
	sink := newSink(t, js, idemnats.SinkConfig{Dedup: idemnats.DedupForever})
	msg := func(i int) idem.Message {
		return idem.Message{ID: fmt.Sprint("id-", i), Topic: prefix + ".t", Payload: []byte("x")}
	}
	for i := range 3 {
		publishOne(t, sink, msg(i))
	}
	if _, err := sink.PublishOne(context.Background(), msg(3)); err == nil || !idem.IsRetryable(err) {
		t.Fatalf("a new ID on a full stream: %v, want a retryable backend error", err)
	}
	if !publishOne(t, sink, msg(0)) {
		t.Fatal("a known ID on a full stream was not reported as a duplicate")
	}

	_, agedPrefix := foreverStream(t, js, idemnats.StreamConfig{Dedup: idemnats.DedupForever, Duplicates: 100 * time.Millisecond, MaxAge: time.Second})
	aged := idem.Message{ID: "id-0", Topic: agedPrefix + ".t", Payload: []byte("x")}
	publishOne(t, sink, aged)
	testsvc.Eventually(t, time.Minute, "MaxAge to free the ID", func() bool { return !publishOne(t, sink, aged) })
}
