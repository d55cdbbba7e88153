package idemredis_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemredis"
	"github.com/idemhq/idem/internal/testsvc"
)

// With Dedup, a copy of a message the sink appended within the window is
// acknowledged and not appended: what an outbox relay publishes again after a
// crash between publish and mark never reaches a consumer. Without it every copy
// is an entry (the inbox drops them).
func TestStreamDedup(t *testing.T) {
	t.Parallel()
	b := streamSetup(t)
	testDedup(t, b.client, b.stream, b.stream+"{tag}", b.stream+"{")
}

// The same on a Redis Cluster: each marker lives in its stream's slot, so one
// script writes both (no CROSSSLOT), whatever the stream's name.
func TestClusterStreamDedup(t *testing.T) {
	t.Parallel()
	b := clusterSetup(t)
	testDedup(t, b.client, b.prefix+"a", b.prefix+"b{tag}", b.prefix+"{c")
}

func testDedup(t *testing.T, client redis.UniversalClient, streams ...string) {
	ctx := ctxFor(t)
	sink, err := idemredis.NewStreamSink(client, idemredis.StreamSinkConfig{Dedup: time.Minute, MaxLen: 1000})
	if err != nil {
		t.Fatal(err)
	}
	plain, err := idemredis.NewStreamSink(client, idemredis.StreamSinkConfig{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { delMarkers(client, streams, "m1", "m2", "m3", "m4") })
	msg := func(stream, id string) idem.Message {
		return idem.Message{ID: id, Topic: stream, Payload: []byte("p-" + id), Headers: map[string]string{"h": id}}
	}
	for _, s := range streams {
		streamPublish(t, sink, msg(s, "m1"), msg(s, "m2"))
		// A relay's round again, with new messages among the copies, in one call.
		streamPublish(t, sink, msg(s, "m2"), msg(s, "m3"), msg(s, "m1"), msg(s, "m4"))
		streamPublish(t, sink, msg(s, "m3"))
		if got := entryIDs(t, client, s); !slices.Equal(got, []string{"m1", "m2", "m3", "m4"}) {
			t.Errorf("stream %s holds %v, want m1 m2 m3 m4 once each, in publish order", s, got)
		}
		// The script writes the entry XADD would: the same fields.
		if xs := client.XRange(ctx, s, "-", "+").Val(); len(xs) > 0 && (xs[0].Values[idemredis.StreamFieldPayload] != "p-m1" ||
			xs[0].Values[idemredis.StreamFieldHeaders] != `{"h":"m1"}`) {
			t.Errorf("stream %s's first entry is %v, want payload p-m1 and headers {\"h\":\"m1\"}", s, xs[0].Values)
		}
		key, err := idemredis.DedupKey(s, "m1")
		if err != nil {
			t.Fatal(err)
		}
		if ttl := client.PTTL(ctx, key).Val(); ttl <= 0 || ttl > time.Minute {
			t.Errorf("marker %s has TTL %v, want (0, 1m]", key, ttl)
		}
	}
	// The window is per stream: the same id on another stream is another message.
	other := streams[0] + "-other"
	t.Cleanup(func() { client.Del(context.Background(), other); delMarkers(client, []string{other}, "m1") })
	streamPublish(t, sink, msg(other, "m1"))
	// A sink without the window appends every copy.
	streamPublish(t, plain, msg(other, "m1"))
	if got := entryIDs(t, client, other); !slices.Equal(got, []string{"m1", "m1"}) {
		t.Errorf("stream %s holds %v, want m1 from the window's sink and its copy from the plain sink", other, got)
	}
	for _, s := range streams {
		client.Del(context.Background(), s)
	}
}

// A copy published after the window is appended again: the marker is gone. Driven
// by the marker's expiry, not by a sleep of the window's length.
func TestStreamDedupWindowEnds(t *testing.T) {
	t.Parallel()
	b := streamSetup(t)
	ctx := ctxFor(t)
	sink, err := idemredis.NewStreamSink(b.client, idemredis.StreamSinkConfig{Dedup: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	m := idem.Message{ID: "m1", Topic: b.stream}
	streamPublish(t, sink, m)
	key, _ := idemredis.DedupKey(b.stream, m.ID)
	for b.client.Exists(ctx, key).Val() == 1 {
		if ctx.Err() != nil {
			t.Fatalf("marker %s still there: %v", key, ctx.Err())
		}
		time.Sleep(10 * time.Millisecond)
	}
	streamPublish(t, sink, m)
	if got := entryIDs(t, b.client, b.stream); !slices.Equal(got, []string{"m1", "m1"}) {
		t.Errorf("stream holds %v, want m1 twice: once in the window, once after it", got)
	}
}

// A batch appended in part (one entry's key holds a string) fails with an
// *idem.PublishError saying which entries were appended, so the outbox relay sends
// only the others again.
func TestStreamPublishPartlyAccepted(t *testing.T) {
	t.Parallel()
	b := streamSetup(t)
	ctx := ctxFor(t)
	wrong := b.prefix + "not-a-stream"
	if err := b.client.Set(ctx, wrong, "x", 0).Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.client.Del(context.Background(), wrong) })
	err := b.sink.Publish(ctx, idem.Message{ID: "a", Topic: b.stream}, idem.Message{ID: "b", Topic: wrong}, idem.Message{ID: "c", Topic: b.stream})
	var pe *idem.PublishError
	if !errors.As(err, &pe) || !slices.Equal(pe.Accepted, []bool{true, false, true}) || !strings.Contains(err.Error(), "WRONGTYPE") {
		t.Fatalf("Publish = %v (%T), want an *idem.PublishError accepting a and c, with Redis's WRONGTYPE", err, err)
	}
	if got := entryIDs(t, b.client, b.stream); !slices.Equal(got, []string{"a", "c"}) {
		t.Fatalf("stream holds %v, want a and c", got)
	}
}

// An append that fails leaves no marker: the retry is appended, not dropped as a
// copy of a message that was never stored.
func TestStreamDedupFailedAppendIsRetried(t *testing.T) {
	t.Parallel()
	b := streamSetup(t)
	ctx := ctxFor(t)
	sink, err := idemredis.NewStreamSink(b.client, idemredis.StreamSinkConfig{Dedup: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	m := idem.Message{ID: "m1", Topic: b.stream}
	key, _ := idemredis.DedupKey(b.stream, m.ID)
	t.Cleanup(func() { b.client.Del(context.Background(), key) })
	if err := b.client.Set(ctx, b.stream, "not a stream", 0).Err(); err != nil {
		t.Fatal(err)
	}
	var be *idem.BackendError
	if err := sink.Publish(ctx, m); !errors.As(err, &be) || !strings.Contains(err.Error(), "WRONGTYPE") {
		t.Fatalf("Publish onto a string key = %v, want a *idem.BackendError with Redis's WRONGTYPE", err)
	}
	if n := b.client.Exists(ctx, key).Val(); n != 0 {
		t.Fatalf("marker %s left by a failed append", key)
	}
	b.client.Del(ctx, b.stream)
	streamPublish(t, sink, m)
	if got := entryIDs(t, b.client, b.stream); !slices.Equal(got, []string{"m1"}) {
		t.Errorf("stream holds %v after the retry, want m1", got)
	}
}

// A server that does not have the script cached (new, restarted, SCRIPT FLUSH)
// gets it with the call: the first publish to a fresh Redis appends.
func TestStreamDedupLoadsItsScript(t *testing.T) {
	t.Parallel()
	client := redis.NewClient(&redis.Options{Addr: testsvc.PrivateRedis(t)})
	t.Cleanup(func() { client.Close() })
	ctx := ctxFor(t)
	stream := testsvc.UniqueName("idemtest:dedup:")
	t.Cleanup(func() { client.Del(context.Background(), stream); delMarkers(client, []string{stream}, "m1", "m2") })
	sink, err := idemredis.NewStreamSink(client, idemredis.StreamSinkConfig{Dedup: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if err := client.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	streamPublish(t, sink, idem.Message{ID: "m1", Topic: stream}, idem.Message{ID: "m2", Topic: stream})
	if err := client.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	streamPublish(t, sink, idem.Message{ID: "m2", Topic: stream})
	if got := entryIDs(t, client, stream); !slices.Equal(got, []string{"m1", "m2"}) {
		t.Errorf("stream holds %v, want m1 m2", got)
	}
}

// A stream name with a '}' outside a hash tag has a slot no marker can share: the
// publish is refused before anything is written, naming the field.
func TestDedupKey(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ stream, want string }{
		{"orders", "idem:dedup:{orders}:id"},
		{"app:{orders}:v2", "idem:dedup:app:{orders}:v2:id"},
		{"a{b", "idem:dedup:{a{b}:id"},
		{"a}b", ""},
		{"{}x", ""},
	} {
		got, err := idemredis.DedupKey(tc.stream, "id")
		var in *idem.InputError
		switch {
		case tc.want == "" && (!errors.As(err, &in) || in.Field != "Message.Topic"):
			t.Errorf("DedupKey(%q) = %q, %v; want an *idem.InputError naming Message.Topic", tc.stream, got, err)
		case tc.want != "" && (err != nil || got != tc.want):
			t.Errorf("DedupKey(%q) = %q, %v; want %q", tc.stream, got, err, tc.want)
		}
	}
	client := redis.NewClient(&redis.Options{Addr: testsvc.RedisAddr()})
	t.Cleanup(func() { client.Close() })
	sink, err := idemredis.NewStreamSink(client, idemredis.StreamSinkConfig{Dedup: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	var in *idem.InputError
	if err := sink.Publish(ctxFor(t), idem.Message{ID: "m1", Topic: "a}b"}); !errors.As(err, &in) || in.Field != "Message.Topic" {
		t.Errorf("Publish to stream a}b with Dedup = %v, want an *idem.InputError naming Message.Topic", err)
	}
}

// entryIDs reads a stream's entries' message ids, in order.
func entryIDs(t *testing.T, client redis.UniversalClient, stream string) []string {
	t.Helper()
	xs, err := client.XRange(ctxFor(t), stream, "-", "+").Result()
	if err != nil {
		t.Fatalf("XRANGE %s: %v", stream, err)
	}
	ids := make([]string, len(xs))
	for i, x := range xs {
		ids[i], _ = x.Values[idemredis.StreamFieldID].(string)
	}
	return ids
}

// delMarkers deletes the window's markers of ids on streams.
func delMarkers(client redis.UniversalClient, streams []string, ids ...string) {
	for _, s := range streams {
		for _, id := range ids {
			if key, err := idemredis.DedupKey(s, id); err == nil {
				client.Del(context.Background(), key)
			}
		}
	}
}
