//go:build unix

package stream_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/idemsqlite"
	"github.com/idemhq/idem/internal/cdp"
	"github.com/idemhq/idem/stream"
)

// TestBrowserSeesEveryEventOnce loads demo.html (which uses idem-stream.js, served by
// the Server) in headless Chromium, appends a burst of events while kicking the page's
// socket several times, and checks that the page rendered every seq exactly once, in order.
func TestBrowserSeesEveryEventOnce(t *testing.T) {
	if _, err := os.Stat(cdp.ChromiumPath); err != nil {
		if os.Getenv("IDEM_REQUIRE_SERVICES") == "1" {
			t.Fatalf("IDEM_REQUIRE_SERVICES=1 but %s is missing (apt-get install chromium): %v", cdp.ChromiumPath, err)
		}
		t.Skipf("%s not installed: %v", cdp.ChromiumPath, err)
	}
	const total = 300
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	// The server, on SQLite.
	dir := t.TempDir()
	sq, err := idemsqlite.Open(ctx, filepath.Join(dir, "stream.db"), idemsqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sq.Close() })
	db, err := idemsql.SQLDB(ctx, sq.DB())
	if err != nil {
		t.Fatal(err)
	}
	store := sqlStore(t, db)
	srv, err := stream.NewServer(store, stream.ServerConfig{AllowAnonymous: true, Heartbeat: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	demoHTML, err := os.ReadFile(filepath.Join("js", "demo.html"))
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/", srv.Handler())
	mux.HandleFunc("GET /demo.html", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = w.Write(demoHTML)
	})
	hs := httptest.NewServer(mux)
	t.Cleanup(hs.Close)
	t.Cleanup(func() { _ = srv.Close() })

	// The browser (cleaned up before the server: t.Cleanup runs last-in first-out).
	br := cdp.Start(t)
	page := br.NewPage(ctx, t)

	channel := "orders-" + strings.ReplaceAll(t.Name(), "/", "-")
	demoURL := hs.URL + "/demo.html?channel=" + url.QueryEscape(channel)
	var nav struct {
		ErrorText string `json:"errorText"`
	}
	if err := page.Call(ctx, "Page.navigate", map[string]any{"url": demoURL}, &nav); err != nil {
		t.Fatal(err)
	}
	if nav.ErrorText != "" {
		t.Fatalf("navigate %s: %s", demoURL, nav.ErrorText)
	}
	type demoState struct {
		State      string `json:"state"`
		Reconnects int    `json:"reconnects"`
		Count      int    `json:"count"`
	}
	const stateJS = `JSON.stringify(window.idemDemo ? {state: idemDemo.state, reconnects: idemDemo.reconnects, count: idemDemo.count} : {})`
	readState := func(ctx context.Context) (demoState, error) {
		var raw string
		var st demoState
		if err := page.Eval(ctx, stateJS, &raw); err != nil {
			return st, err
		}
		err := json.Unmarshal([]byte(raw), &st)
		return st, err
	}
	// waitFor polls the page until ok, for at most limit.
	waitFor := func(limit time.Duration, what string, ok func(demoState) bool) (demoState, error) {
		wctx, wcancel := context.WithTimeout(ctx, limit)
		defer wcancel()
		for {
			st, err := readState(wctx)
			if err == nil && ok(st) {
				return st, nil
			}
			select {
			case <-wctx.Done():
				return st, fmt.Errorf("waiting for %s: page state %+v (last error %v): %w", what, st, err, wctx.Err())
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
	if _, err := waitFor(30*time.Second, "the page to connect", func(s demoState) bool { return s.State == "open" }); err != nil {
		t.Fatalf("%v\nbrowser console:\n%s", err, page.Logs())
	}

	// The burst: 300 events, with a kick of the channel's sockets at 6 points. Before
	// each kick it waits until the page has reconnected after the previous one, so each
	// kick cuts a live socket.
	kickAt := map[int]bool{40: true, 90: true, 140: true, 190: true, 240: true, 290: true}
	type kick struct{ at, n int }
	var kicks []kick
	burstErr := make(chan error, 1)
	go func() {
		burstErr <- func() error {
			reconnects := 0
			for i := 1; i <= total; i++ {
				e, err := srv.Append(ctx, channel, stream.Event{
					Type: "order.updated",
					ID:   fmt.Sprintf("o-%d", i%7),
					Data: json.RawMessage(fmt.Sprintf(`{"n":%d}`, i)),
				})
				if err != nil {
					return fmt.Errorf("append %d: %w", i, err)
				}
				if e.Seq != uint64(i) {
					return fmt.Errorf("append %d: got seq %d", i, e.Seq)
				}
				if kickAt[i] {
					st, err := waitFor(30*time.Second, "a reconnect before the next kick", func(s demoState) bool {
						return s.State == "open" && s.Reconnects >= reconnects
					})
					if err != nil {
						return err
					}
					kicks = append(kicks, kick{i, srv.Kick(channel)})
					reconnects = st.Reconnects + 1
				}
				if i%10 == 0 { // pace the burst over real time, so the page renders while events arrive
					time.Sleep(5 * time.Millisecond)
				}
			}
			return nil
		}()
	}()

	// Wait for the page to show every event.
	st, waitErr := waitFor(60*time.Second, fmt.Sprintf("%d events on the page", total), func(s demoState) bool { return s.Count >= total })
	if err := <-burstErr; err != nil {
		t.Errorf("burst: %v", err)
	}
	if waitErr != nil {
		t.Errorf("%v", waitErr)
	}
	// Give duplicates (a bug) a moment to show up, then read what the page rendered:
	// absence over real time, which no hook of the page can signal.
	time.Sleep(300 * time.Millisecond)
	var raw string
	if err := page.Eval(ctx, `JSON.stringify(Array.from(document.querySelectorAll('#events li'), li => Number(li.dataset.seq)))`, &raw); err != nil {
		t.Fatal(err)
	}
	var seqs []uint64
	if err := json.Unmarshal([]byte(raw), &seqs); err != nil {
		t.Fatalf("page list %q: %v", raw, err)
	}
	if st2, err := readState(ctx); err == nil {
		st = st2
	}
	kicked := 0
	for _, k := range kicks {
		if k.n > 0 {
			kicked++
		}
	}
	t.Logf("kicks (after event, sockets closed): %v; page reconnects: %d; state: %s", kicks, st.Reconnects, st.State)

	if len(seqs) != total {
		t.Errorf("page shows %d events, want %d", len(seqs), total)
	}
	for i, seq := range seqs {
		if seq != uint64(i+1) {
			t.Errorf("item %d has seq %d, want %d (the page must show 1..%d in order, each once); list: %v", i, seq, i+1, total, seqs)
			break
		}
	}
	if kicked < 4 {
		t.Errorf("only %d of %d kicks closed a socket (want at least 4): %v", kicked, len(kicks), kicks)
	}
	if st.Reconnects < kicked {
		t.Errorf("page reconnected %d times after %d kicks", st.Reconnects, kicked)
	}

	// The page's client id: a random UUID, kept for the tab in sessionStorage, so
	// that its acks are its own (a second stream in the tab reuses it).
	var ids string
	if err := page.Eval(ctx, `JSON.stringify([idemDemo.stream.client, sessionStorage.getItem('idem-stream-client'),
		new IdemStream({channel: 'x', onEvent: function () {}}).client])`, &ids); err != nil {
		t.Fatal(err)
	}
	var id []string
	if err := json.Unmarshal([]byte(ids), &id); err != nil || len(id) != 3 {
		t.Fatalf("client ids %q: %v", ids, err)
	}
	if !regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`).MatchString(id[0]) || id[1] != id[0] || id[2] != id[0] {
		t.Errorf("client ids (stream, sessionStorage, second stream) = %q, want one random UUID for the tab", id)
	}

	// Screenshot of the whole page.
	png, err := page.Screenshot(ctx)
	if err != nil {
		t.Errorf("screenshot: %v", err)
	} else {
		path := filepath.Join(t.TempDir(), "browser.png")
		if d := os.Getenv("IDEM_SCREENSHOT_DIR"); d != "" {
			if err := os.MkdirAll(d, 0o755); err != nil {
				t.Error(err)
			}
			path = filepath.Join(d, "stream-browser.png")
		}
		if err := os.WriteFile(path, png, 0o644); err != nil {
			t.Error(err)
		} else {
			t.Logf("screenshot: %s", path)
		}
	}
	if t.Failed() {
		t.Logf("browser console:\n%s", page.Logs())
	}
}
