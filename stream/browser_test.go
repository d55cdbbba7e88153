//go:build unix

package stream_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemsqlite"
	"github.com/idemhq/idem/stream"
)

const chromiumPath = "/usr/bin/chromium"

// TestBrowserSeesEveryEventOnce loads demo.html (which uses idem-stream.js, served by
// the Server) in headless Chromium, appends a burst of events while kicking the page's
// socket several times, and checks that the page rendered every seq exactly once, in order.
func TestBrowserSeesEveryEventOnce(t *testing.T) {
	if _, err := os.Stat(chromiumPath); err != nil {
		if os.Getenv("IDEM_REQUIRE_SERVICES") == "1" {
			t.Fatalf("IDEM_REQUIRE_SERVICES=1 but %s is missing (apt-get install chromium): %v", chromiumPath, err)
		}
		t.Skipf("%s not installed: %v", chromiumPath, err)
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
	db, err := idem.SQLDB(ctx, sq.DB())
	if err != nil {
		t.Fatal(err)
	}
	store, err := stream.NewSQLStore(ctx, db, stream.SQLConfig{})
	if err != nil {
		t.Fatal(err)
	}
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
	br := startChromium(t)
	page := br.newPage(ctx, t)

	channel := "orders-" + strings.ReplaceAll(t.Name(), "/", "-")
	demoURL := hs.URL + "/demo.html?channel=" + url.QueryEscape(channel)
	var nav struct {
		ErrorText string `json:"errorText"`
	}
	if err := page.call(ctx, "Page.navigate", map[string]any{"url": demoURL}, &nav); err != nil {
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
		if err := page.eval(ctx, stateJS, &raw); err != nil {
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
		t.Fatalf("%v\nbrowser console:\n%s", err, page.logs())
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
	if err := page.eval(ctx, `JSON.stringify(Array.from(document.querySelectorAll('#events li'), li => Number(li.dataset.seq)))`, &raw); err != nil {
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
	if err := page.eval(ctx, `JSON.stringify([idemDemo.stream.client, sessionStorage.getItem('idem-stream-client'),
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
	png, err := page.screenshot(ctx)
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
		t.Logf("browser console:\n%s", page.logs())
	}
}

// chromium is a headless Chromium process and a DevTools connection to it.
type chromium struct {
	cmd *exec.Cmd
	cdp *cdpConn
}

// startChromium launches headless Chromium in its own process group and connects to
// its DevTools endpoint. t.Cleanup closes it and kills whatever remains of the group.
func startChromium(t *testing.T) *chromium {
	t.Helper()
	profile := t.TempDir()
	cmd := exec.Command(chromiumPath,
		"--headless=new", "--no-sandbox", "--disable-gpu", "--remote-debugging-port=0",
		"--user-data-dir="+profile, "--no-first-run", "--disable-dev-shm-usage", "about:blank")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out := &stderrWatch{found: make(chan string, 1)}
	cmd.Stderr = out
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", chromiumPath, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	br := &chromium{cmd: cmd}
	t.Cleanup(func() {
		if br.cdp != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_ = br.cdp.call(ctx, "", "Browser.close", nil, nil)
			cancel()
			br.cdp.close()
		}
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-exited
		}
		// Children that outlived the browser process (none expected).
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	})

	var wsURL string
	select {
	case wsURL = <-out.found:
	case err := <-exited:
		exited <- err
		t.Fatalf("chromium exited (%v) before DevTools listened; stderr:\n%s", err, out.String())
	case <-time.After(30 * time.Second):
		t.Fatalf("no DevTools URL from chromium within 30s; stderr:\n%s", out.String())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := dialCDP(ctx, wsURL)
	if err != nil {
		t.Fatalf("dial DevTools %s: %v", wsURL, err)
	}
	br.cdp = c
	return br
}

// newPage opens a tab, attaches to it (flat session) and enables Runtime events.
func (b *chromium) newPage(ctx context.Context, t *testing.T) *cdpPage {
	t.Helper()
	var created struct {
		TargetID string `json:"targetId"`
	}
	if err := b.cdp.call(ctx, "", "Target.createTarget", map[string]any{"url": "about:blank"}, &created); err != nil {
		t.Fatal(err)
	}
	var attached struct {
		SessionID string `json:"sessionId"`
	}
	if err := b.cdp.call(ctx, "", "Target.attachToTarget", map[string]any{"targetId": created.TargetID, "flatten": true}, &attached); err != nil {
		t.Fatal(err)
	}
	p := &cdpPage{c: b.cdp, session: attached.SessionID}
	for _, m := range []string{"Runtime.enable", "Page.enable"} {
		if err := p.call(ctx, m, nil, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.call(ctx, "Emulation.setDeviceMetricsOverride", map[string]any{
		"width": 1100, "height": 800, "deviceScaleFactor": 1, "mobile": false,
	}, nil); err != nil {
		t.Fatal(err)
	}
	return p
}

// stderrWatch collects Chromium's stderr and reports the DevTools URL it prints.
type stderrWatch struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	found chan string
	sent  bool
}

func (w *stderrWatch) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	if !w.sent {
		sc := bufio.NewScanner(bytes.NewReader(w.buf.Bytes()))
		for sc.Scan() {
			if _, u, ok := strings.Cut(sc.Text(), "DevTools listening on "); ok && strings.HasPrefix(u, "ws://") {
				w.found <- strings.TrimSpace(u)
				w.sent = true
				break
			}
		}
	}
	return len(p), nil
}

func (w *stderrWatch) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// cdpConn is a minimal Chrome DevTools Protocol client: numbered calls over one
// WebSocket, flat sessions, and the page's console output kept for diagnostics.
type cdpConn struct {
	ws     *websocket.Conn
	nextID atomic.Int64

	mu      sync.Mutex
	pending map[int64]chan cdpMessage
	console []string
	err     error
	done    chan struct{}
}

type cdpMessage struct {
	ID        int64           `json:"id,omitempty"`
	Method    string          `json:"method,omitempty"`
	Params    json.RawMessage `json:"params,omitempty"`
	SessionID string          `json:"sessionId,omitempty"`
	Result    json.RawMessage `json:"result,omitempty"`
	Error     *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
		Data    string `json:"data"`
	} `json:"error,omitempty"`
}

func dialCDP(ctx context.Context, wsURL string) (*cdpConn, error) {
	ws, _, err := websocket.Dial(ctx, wsURL, nil)
	if err != nil {
		return nil, err
	}
	ws.SetReadLimit(256 << 20) // screenshots
	c := &cdpConn{ws: ws, pending: map[int64]chan cdpMessage{}, done: make(chan struct{})}
	go c.readLoop()
	return c, nil
}

func (c *cdpConn) readLoop() {
	for {
		_, data, err := c.ws.Read(context.Background())
		if err != nil {
			c.mu.Lock()
			c.err = err
			c.mu.Unlock()
			close(c.done)
			return
		}
		var m cdpMessage
		if err := json.Unmarshal(data, &m); err != nil {
			continue
		}
		if m.ID != 0 {
			c.mu.Lock()
			ch := c.pending[m.ID]
			delete(c.pending, m.ID)
			c.mu.Unlock()
			if ch != nil {
				ch <- m
			}
			continue
		}
		if line := consoleLine(m); line != "" {
			c.mu.Lock()
			c.console = append(c.console, line)
			c.mu.Unlock()
		}
	}
}

// consoleLine renders console calls and uncaught exceptions of the page.
func consoleLine(m cdpMessage) string {
	switch m.Method {
	case "Runtime.consoleAPICalled":
		var p struct {
			Type string `json:"type"`
			Args []struct {
				Value       any    `json:"value"`
				Description string `json:"description"`
			} `json:"args"`
		}
		_ = json.Unmarshal(m.Params, &p)
		parts := []string{"console." + p.Type + ":"}
		for _, a := range p.Args {
			if a.Value != nil {
				parts = append(parts, fmt.Sprint(a.Value))
			} else {
				parts = append(parts, a.Description)
			}
		}
		return strings.Join(parts, " ")
	case "Runtime.exceptionThrown":
		var p struct {
			ExceptionDetails struct {
				Text      string `json:"text"`
				Exception struct {
					Description string `json:"description"`
				} `json:"exception"`
			} `json:"exceptionDetails"`
		}
		_ = json.Unmarshal(m.Params, &p)
		return "exception: " + p.ExceptionDetails.Text + " " + p.ExceptionDetails.Exception.Description
	}
	return ""
}

// call sends method (on session, "" for the browser) and decodes the result into out.
func (c *cdpConn) call(ctx context.Context, session, method string, params, out any) error {
	if params == nil {
		params = struct{}{}
	}
	id := c.nextID.Add(1)
	req := map[string]any{"id": id, "method": method, "params": params}
	if session != "" {
		req["sessionId"] = session
	}
	data, err := json.Marshal(req)
	if err != nil {
		return err
	}
	reply := make(chan cdpMessage, 1)
	c.mu.Lock()
	c.pending[id] = reply
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.pending, id)
		c.mu.Unlock()
	}()
	if err := c.ws.Write(ctx, websocket.MessageText, data); err != nil {
		return fmt.Errorf("%s: %w", method, err)
	}
	select {
	case m := <-reply:
		if m.Error != nil {
			return fmt.Errorf("%s: %d %s %s", method, m.Error.Code, m.Error.Message, m.Error.Data)
		}
		if out != nil {
			return json.Unmarshal(m.Result, out)
		}
		return nil
	case <-c.done:
		c.mu.Lock()
		defer c.mu.Unlock()
		return fmt.Errorf("%s: DevTools connection lost: %w", method, c.err)
	case <-ctx.Done():
		return fmt.Errorf("%s: %w", method, ctx.Err())
	}
}

func (c *cdpConn) close() { _ = c.ws.CloseNow() }

// cdpPage is a flat session on one tab.
type cdpPage struct {
	c       *cdpConn
	session string
}

func (p *cdpPage) call(ctx context.Context, method string, params, out any) error {
	return p.c.call(ctx, p.session, method, params, out)
}

// eval evaluates expr in the page and decodes its value (returned by value) into out.
func (p *cdpPage) eval(ctx context.Context, expr string, out any) error {
	var r struct {
		Result struct {
			Type  string          `json:"type"`
			Value json.RawMessage `json:"value"`
		} `json:"result"`
		ExceptionDetails *struct {
			Text      string `json:"text"`
			Exception struct {
				Description string `json:"description"`
			} `json:"exception"`
		} `json:"exceptionDetails"`
	}
	if err := p.call(ctx, "Runtime.evaluate", map[string]any{"expression": expr, "returnByValue": true}, &r); err != nil {
		return err
	}
	if d := r.ExceptionDetails; d != nil {
		return fmt.Errorf("evaluate %q: %s %s", expr, d.Text, d.Exception.Description)
	}
	if len(r.Result.Value) == 0 {
		return errors.New("evaluate: no value (type " + r.Result.Type + ")")
	}
	return json.Unmarshal(r.Result.Value, out)
}

func (p *cdpPage) screenshot(ctx context.Context) ([]byte, error) {
	var r struct {
		Data string `json:"data"`
	}
	if err := p.call(ctx, "Page.captureScreenshot", map[string]any{"format": "png", "captureBeyondViewport": true}, &r); err != nil {
		return nil, err
	}
	return base64.StdEncoding.DecodeString(r.Data)
}

func (p *cdpPage) logs() string {
	p.c.mu.Lock()
	defer p.c.mu.Unlock()
	if len(p.c.console) == 0 {
		return "(nothing)"
	}
	return strings.Join(p.c.console, "\n")
}
