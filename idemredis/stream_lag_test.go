package idemredis_test

import (
	"strings"
	"testing"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemredis"
)

// TestStreamLagAfterXDEL: after an entry the group has not read yet is deleted,
// Redis reports no lag for the group, and Lag says so in an error instead of
// guessing; once the group has read past the deletion, Lag counts again.
func TestStreamLagAfterXDEL(t *testing.T) {
	t.Parallel()
	b := streamSetup(t)
	ctx := ctxFor(t)
	msgs := []idem.Message{{ID: "a", Topic: b.stream}, {ID: "b", Topic: b.stream}, {ID: "c", Topic: b.stream}}
	if err := b.sink.Publish(ctx, msgs...); err != nil {
		t.Fatal(err)
	}
	src := b.source(t, idemredis.StreamSourceConfig{})
	first := streamReceive(t, src, 1)
	streamAck(t, first...)
	entries, err := b.client.XRange(ctx, b.stream, "-", "+").Result()
	if err != nil {
		t.Fatal(err)
	}
	if err := b.client.XDel(ctx, b.stream, entries[1].ID).Err(); err != nil { // "b", not read yet
		t.Fatal(err)
	}
	if _, err := src.Lag(ctx); err == nil || !strings.Contains(err.Error(), "cannot count") {
		t.Fatalf("Lag after XDEL of an unread entry = %v; want the error saying Redis cannot count", err)
	}
	rest := streamReceive(t, src, 1) // "c": the group reads past the deleted entry
	if rest[0].ID != "c" {
		t.Fatalf("received %s, want c", rest[0].ID)
	}
	lag, err := src.Lag(ctx)
	if err != nil || lag.Messages != 1 {
		t.Fatalf("Lag with c delivered and not acked = %+v, %v; want 1 (pending)", lag, err)
	}
	streamAck(t, rest...)
	if lag, err := src.Lag(ctx); err != nil || lag.Messages != 0 {
		t.Fatalf("Lag after acking c = %+v, %v; want 0", lag, err)
	}
}
