package stream_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"

	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/idemsqlite"
	"github.com/idemhq/idem/stream"
)

// A user's order events, appended to the channel "user:alice" and read back over
// GET /events after the last seq the client saw. Authorize lets a caller read
// only its own channel (here from a header; in an app, from the session).
func ExampleServer() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "stream-example-")
	defer os.RemoveAll(dir)
	store, closeDB := openStore(ctx, dir)
	defer closeDB()

	srv, err := stream.NewServer(store, stream.ServerConfig{
		Authorize: func(r *http.Request, channel string) error {
			if channel != "user:"+r.Header.Get("X-User") {
				return errors.New("not your channel")
			}
			return nil
		},
	})
	if err != nil {
		panic(err)
	}
	defer srv.Close()
	for _, typ := range []string{"order.placed", "order.paid", "order.shipped"} {
		e, _ := srv.Append(ctx, "user:alice", stream.Event{Type: typ, ID: "o-1"})
		fmt.Println("appended", e.Seq, e.Type)
	}

	ts := httptest.NewServer(srv.Handler())
	defer ts.Close()
	for _, user := range []string{"alice", "mallory"} {
		req, _ := http.NewRequest(http.MethodGet, ts.URL+"/events?channel=user:alice&since=1", nil)
		req.Header.Set("X-User", user)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			panic(err)
		}
		var page struct {
			Head   uint64         `json:"head"`
			Events []stream.Event `json:"events"`
		}
		_ = json.NewDecoder(resp.Body).Decode(&page)
		resp.Body.Close()
		fmt.Println(user, resp.StatusCode, len(page.Events), "events, head", page.Head)
		for _, e := range page.Events {
			fmt.Println("  seq", e.Seq, e.Type)
		}
	}
	// Output:
	// appended 1 order.placed
	// appended 2 order.paid
	// appended 3 order.shipped
	// alice 200 2 events, head 3
	//   seq 2 order.paid
	//   seq 3 order.shipped
	// mallory 403 0 events, head 0
}

// The Go Client receives a public channel over the WebSocket: the events stored
// before it connected, then live ones, each once and in seq order.
func ExampleClient() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dir, _ := os.MkdirTemp("", "stream-example-")
	defer os.RemoveAll(dir)
	store, closeDB := openStore(ctx, dir)
	defer closeDB()
	srv, _ := stream.NewServer(store, stream.ServerConfig{AllowAnonymous: true})
	ts := httptest.NewServer(srv.Handler())
	defer ts.Close()
	defer srv.Close()

	srv.Append(ctx, "news", stream.Event{Type: "headline", Data: json.RawMessage(`"one"`)})
	srv.Append(ctx, "news", stream.Event{Type: "headline", Data: json.RawMessage(`"two"`)})
	client, _ := stream.NewClient(stream.ClientConfig{
		URL:     ts.URL,
		Channel: "news",
		OnEvent: func(e stream.Event) error {
			fmt.Println("seq", e.Seq, string(e.Data))
			switch e.Seq {
			case 2: // caught up: publish a live one
				go srv.Append(ctx, "news", stream.Event{Type: "headline", Data: json.RawMessage(`"three"`)})
			case 3:
				cancel()
			}
			return nil
		},
	})
	err := client.Run(ctx)
	fmt.Println(errors.Is(err, context.Canceled), client.LastSeq())
	// Output:
	// seq 1 "one"
	// seq 2 "two"
	// seq 3 "three"
	// true 3
}

// openStore opens a stream store in a SQLite file under dir.
func openStore(ctx context.Context, dir string) (*stream.SQLStore[*sql.Tx], func()) {
	sq, err := idemsqlite.Open(ctx, filepath.Join(dir, "app.db"), idemsqlite.Config{})
	if err != nil {
		panic(err)
	}
	db, err := idemsql.SQLDB(ctx, sq.DB())
	if err != nil {
		panic(err)
	}
	store, err := stream.NewSQLStore(ctx, db, stream.SQLConfig{})
	if err != nil {
		panic(err)
	}
	return store, func() { sq.Close() }
}
