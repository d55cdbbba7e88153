package otelx_test

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"go.opentelemetry.io/otel/attribute"

	"github.com/idemhq/idem/internal/otelx"
	"github.com/idemhq/idem/internal/sqltest"
	"github.com/idemhq/idem/internal/testsvc"
	"github.com/idemhq/idem/stream"
)

// TestStreamSpans: each Append is an idem.stream.append span under the caller's,
// with the channel, key and seq; a client replaying three events gets them in one
// write batch, one idem.stream.push span (not one per event).
func TestStreamSpans(t *testing.T) {
	t.Parallel()
	tr := newTracing(t)
	ctx := context.Background()
	store, err := stream.NewSQLStore(ctx, sqltest.SQLite(t), stream.SQLConfig{})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := stream.NewServer(store, stream.ServerConfig{AllowAnonymous: true, TracerProvider: tr.tp})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(func() { srv.Close(); hs.Close() })

	cctx, root := tr.tp.Tracer("t").Start(ctx, "caller")
	for _, key := range []string{"e-1", "e-2", "e-3"} {
		if _, err := srv.Append(cctx, "user-1", stream.Event{Type: "order.updated", Key: key}); err != nil {
			t.Fatal(err)
		}
	}
	root.End()
	appends := tr.named(otelx.SpanStreamAppend)
	if len(appends) != 3 {
		t.Fatalf("%d append spans, want 3; spans: %v", len(appends), tr.names())
	}
	for i, a := range appends {
		wantChild(t, a, tr.one(t, "caller"))
		wantAttrs(t, a, map[attribute.Key]any{otelx.KeyChannel: "user-1", otelx.KeyKey: []string{"e-1", "e-2", "e-3"}[i], otelx.KeySeq: i + 1})
	}

	ws, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(hs.URL, "http")+"/stream", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.CloseNow()
	if err := ws.Write(ctx, websocket.MessageText, []byte(`{"type":"hello","channel":"user-1","since":0,"client":"c-1"}`)); err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	events := 0
	for events < 3 {
		_, data, err := ws.Read(rctx)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(data), `"type":"event"`) {
			events++
		}
	}
	testsvc.Eventually(t, 10*time.Second, "the push span ends", func() bool { return len(tr.named(otelx.SpanStreamPush)) > 0 })
	push := tr.one(t, otelx.SpanStreamPush)
	wantAttrs(t, push, map[attribute.Key]any{otelx.KeyChannel: "user-1", otelx.KeyEvents: 3, otelx.KeyFirstSeq: 1, otelx.KeySeq: 3})
}
