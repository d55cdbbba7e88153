//go:build unix

// Package cdp is a minimal Chrome DevTools Protocol client for the browser tests
// (stream, admin/console): it starts headless Chromium, opens pages, evaluates
// JavaScript and takes screenshots.
package cdp

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// ChromiumPath is where the Debian package installs Chromium.
const ChromiumPath = "/usr/bin/chromium"

// chromium is a headless Chromium process and a DevTools connection to it.
type Chromium struct {
	cmd *exec.Cmd
	cdp *cdpConn
}

// Start launches headless Chromium in its own process group and connects to
// its DevTools endpoint. t.Cleanup closes it and kills whatever remains of the group.
func Start(t testing.TB) *Chromium {
	t.Helper()
	profile := t.TempDir()
	cmd := exec.Command(ChromiumPath,
		"--headless=new", "--no-sandbox", "--disable-gpu", "--remote-debugging-port=0",
		"--user-data-dir="+profile, "--no-first-run", "--disable-dev-shm-usage", "about:blank")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out := &stderrWatch{found: make(chan string, 1)}
	cmd.Stderr = out
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", ChromiumPath, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	br := &Chromium{cmd: cmd}
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
	case <-time.After(startBound):
		t.Fatalf("no DevTools URL from chromium within %v; stderr:\n%s", startBound, out.String())
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

// NewPage opens a tab, attaches to it (flat session) and enables Runtime events.
func (b *Chromium) NewPage(ctx context.Context, t testing.TB) *Page {
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
	p := &Page{c: b.cdp, session: attached.SessionID}
	for _, m := range []string{"Runtime.enable", "Page.enable"} {
		if err := p.Call(ctx, m, nil, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Call(ctx, "Emulation.setDeviceMetricsOverride", map[string]any{
		"width": 1100, "height": 800, "deviceScaleFactor": 1, "mobile": false,
	}, nil); err != nil {
		t.Fatal(err)
	}
	return p
}

// startBound is how long a Chromium that neither listens nor exits is waited for:
// a bound on a hung browser, not an expectation of its speed. A first start on a
// loaded machine (its caches built while the other packages' tests run) took over
// 30 s in CI.
const startBound = 2 * time.Minute

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

// Page is a flat session on one tab.
type Page struct {
	c       *cdpConn
	session string
}

func (p *Page) Call(ctx context.Context, method string, params, out any) error {
	return p.c.call(ctx, p.session, method, params, out)
}

// eval evaluates expr in the page and decodes its value (returned by value) into out.
func (p *Page) Eval(ctx context.Context, expr string, out any) error {
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
	if err := p.Call(ctx, "Runtime.evaluate", map[string]any{"expression": expr, "returnByValue": true}, &r); err != nil {
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

func (p *Page) Screenshot(ctx context.Context) ([]byte, error) {
	var r struct {
		Data string `json:"data"`
	}
	if err := p.Call(ctx, "Page.captureScreenshot", map[string]any{"format": "png", "captureBeyondViewport": true}, &r); err != nil {
		return nil, err
	}
	return base64.StdEncoding.DecodeString(r.Data)
}

func (p *Page) Logs() string {
	p.c.mu.Lock()
	defer p.c.mu.Unlock()
	if len(p.c.console) == 0 {
		return "(nothing)"
	}
	return strings.Join(p.c.console, "\n")
}
