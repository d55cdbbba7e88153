package main

import (
	"bufio"
	"database/sql"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemhq/idem/idemhttp"
	"github.com/idemhq/idem/internal/testsvc"
)

// A hung upstream does not hold the gateway's goroutines and connections after
// its clients left: every upstream call ends at --upstream-timeout, its key is
// released (not stored), and a retry with the key runs the request again.
//
// Not parallel: it counts the process's goroutines.
func TestServeHungUpstreamIsBounded(t *testing.T) {
	hang := make(chan struct{})
	var calls sync.Map // key -> *atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := calls.LoadOrStore(r.Header.Get(idemhttp.HeaderKey), new(atomic.Int64))
		n.(*atomic.Int64).Add(1)
		_, _ = io.Copy(io.Discard, r.Body) // then net/http notices the caller hanging up
		select {                           // hung until the gateway gives up on the call (or the test ends)
		case <-hang:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(up.Close)
	t.Cleanup(func() { close(hang) }) // first: up.Close waits for its handlers
	g := startGateway(t, up.URL, "--store", "memory:", "--upstream-timeout", "1s")

	// Warm up one request so the gateway's and the upstream's lasting goroutines
	// (listeners, idle connections) are part of the baseline.
	warm := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{}}
	if resp, err := warm.Get("http://" + g.addr + "/warm"); err == nil {
		resp.Body.Close()
	}
	warm.CloseIdleConnections()
	base := runtime.NumGoroutine()
	const requests = 100
	client := &http.Client{Timeout: 200 * time.Millisecond, Transport: &http.Transport{}}
	var wg sync.WaitGroup
	for i := range requests {
		wg.Go(func() {
			req, _ := http.NewRequest("POST", "http://"+g.addr+"/hang", strings.NewReader("x"))
			req.Header.Set(idemhttp.HeaderKey, "hung-"+strconv.Itoa(i))
			if resp, err := client.Do(req); err == nil { // the client leaves after 200 ms
				resp.Body.Close()
			}
		})
	}
	wg.Wait()
	client.CloseIdleConnections()
	deadline := time.Now().Add(30 * time.Second)
	for runtime.NumGoroutine() > base+10 {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<16)
			t.Fatalf("%d goroutines 30 s after the clients left, %d before: the upstream calls are not bounded\n%s",
				runtime.NumGoroutine(), base, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(50 * time.Millisecond)
	}

	// The timed-out key was released, not stored: a retry runs the upstream again,
	// and its own timeout is a 504 problem.
	r := send(t, "POST", "http://"+g.addr+"/hang", "hung-7", "x")
	if r.status != http.StatusGatewayTimeout || r.header.Get("Content-Type") != "application/problem+json" ||
		r.header.Get(idemhttp.HeaderReplayed) != "" || !strings.Contains(string(r.body), "released") {
		t.Fatalf("retry of a timed-out key: %d %v %s, want a 504 problem, not a replay", r.status, r.header, r.body)
	}
	if n, _ := calls.Load("hung-7"); n.(*atomic.Int64).Load() != 2 {
		t.Fatalf("upstream called %d times for the timed-out key, want 2 (the first call, and the retry)", n.(*atomic.Int64).Load())
	}
}

// A client that trickles its request body is cut off at --read-timeout instead of
// holding a connection and a goroutine for as long as it likes.
func TestServeSlowBodyIsTimedOut(t *testing.T) {
	t.Parallel()
	up := newUpstream(t, nil, nil)
	g := startGateway(t, up.URL, "--store", "memory:", "--read-timeout", "500ms")
	conn, err := net.Dial("tcp", g.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, "POST /orders HTTP/1.1\r\nHost: gw\r\nIdempotency-Key: slow-1\r\nContent-Length: 100000\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	go func() { // a byte every 100 ms, until the gateway closes the connection
		for {
			if _, err := conn.Write([]byte("x")); err != nil {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
	}()
	_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	_, err = io.ReadAll(bufio.NewReader(conn))
	if ne, ok := errors.AsType[net.Error](err); ok && ne.Timeout() {
		t.Fatalf("the trickling connection was still open after 30 s: %v", err)
	}
	if n := up.callsOf("POST", "slow-1"); n != 0 {
		t.Errorf("upstream called %d times for an incomplete request", n)
	}
}

// Userinfo in --upstream is sent as basic authentication to the upstream when the
// client sent no Authorization of its own, and never printed.
func TestServeUpstreamUserinfo(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var seen []string
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Header.Get("Authorization"))
		mu.Unlock()
		w.WriteHeader(http.StatusCreated)
	}))
	t.Cleanup(up.Close)
	g := startGateway(t, strings.Replace(up.URL, "http://", "http://gw:s3cret-pw@", 1), "--store", "memory:")
	for _, auth := range []string{"", "Bearer client-token"} {
		req, _ := http.NewRequest("POST", "http://"+g.addr+"/orders", strings.NewReader("{}"))
		req.Header.Set(idemhttp.HeaderKey, "userinfo-"+auth)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusCreated {
			t.Fatalf("POST: %d", resp.StatusCode)
		}
	}
	basic := "Basic Z3c6czNjcmV0LXB3" // gw:s3cret-pw
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 2 || seen[0] != basic || seen[1] != "Bearer client-token" {
		t.Fatalf("upstream saw Authorization %q, want the URL's basic auth, then the client's own", seen)
	}
	if strings.Contains(g.stderr.String(), "s3cret-pw") {
		t.Errorf("the upstream's password was printed:\n%s", g.stderr)
	}
}

// An upstream slower than --lease is not run twice: the gateway renews the key's
// lease while it works, retries meanwhile get 409, and then the replay.
//
// Driven by progress: the upstream holds the call until the record in the
// gateway's file has been renewed and its first lease has run out, which only
// the renewals bridge. The lease is long enough (renewed every second) that a
// loaded machine does not starve the renewals past it.
func TestServeSlowUpstreamKeepsItsKey(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	var once sync.Once
	var up *upstream
	up = newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		if up.callsOf("POST", "slow-key") > 1 {
			w.WriteHeader(http.StatusTeapot) // a second run: the bug
			return
		}
		<-release
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, "slow and done")
	}, nil)
	t.Cleanup(func() { once.Do(func() { close(release) }) })
	path := filepath.Join(t.TempDir(), "gateway.db")
	g := startGateway(t, up.URL, "--store", "sqlite:"+path, "--lease", "3s")
	first := make(chan reply, 1)
	var wg sync.WaitGroup
	wg.Go(func() { first <- send(t, "POST", "http://"+g.addr+"/slow", "slow-key", "x") })
	// The first request ends (and stops using t) before the test does, whatever fails.
	defer wg.Wait()
	defer once.Do(func() { close(release) })

	testsvc.Eventually(t, time.Minute, "the upstream to receive the first request", func() bool { return up.callsOf("POST", "slow-key") > 0 })
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	leaseEnd := func() int64 {
		var end int64
		if err := db.QueryRow("SELECT expires_ns FROM idem_records WHERE state = 1").Scan(&end); err != nil {
			t.Fatalf("the record in progress: %v", err)
		}
		return end
	}
	firstEnd := leaseEnd()
	for renewed := false; !renewed || time.Now().UnixNano() <= firstEnd; time.Sleep(100 * time.Millisecond) {
		if r := send(t, "POST", "http://"+g.addr+"/slow", "slow-key", "x"); r.status != http.StatusConflict {
			t.Fatalf("retry while the upstream works: %d %s, want 409", r.status, r.body)
		}
		renewed = leaseEnd() > firstEnd
	}
	once.Do(func() { close(release) })
	if r := <-first; r.status != http.StatusCreated {
		t.Fatalf("first: %d %s", r.status, r.body)
	}
	if r := send(t, "POST", "http://"+g.addr+"/slow", "slow-key", "x"); r.status != http.StatusCreated || r.header.Get(idemhttp.HeaderReplayed) != "true" {
		t.Fatalf("retry after: %d %v, want the replay", r.status, r.header)
	}
	if n := up.callsOf("POST", "slow-key"); n != 1 {
		t.Fatalf("upstream ran %d times, want 1", n)
	}
}

// The gateway replays the upstream's end-to-end headers, but not its cookies.
func TestServeReplaysUpstreamHeaders(t *testing.T) {
	t.Parallel()
	var calls atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := calls.Add(1)
		w.Header().Set("X-Order-Id", "ord_"+strconv.FormatInt(n, 10))
		w.Header().Set("Set-Cookie", "session=s"+strconv.FormatInt(n, 10))
		w.WriteHeader(http.StatusCreated)
	}))
	t.Cleanup(up.Close)
	g := startGateway(t, up.URL, "--store", "memory:")
	first := send(t, "POST", "http://"+g.addr+"/orders", "hdr-1", "{}")
	again := send(t, "POST", "http://"+g.addr+"/orders", "hdr-1", "{}")
	if first.header.Get("X-Order-Id") != "ord_1" || first.header.Get("Set-Cookie") == "" {
		t.Fatalf("first response headers %v", first.header)
	}
	if again.header.Get(idemhttp.HeaderReplayed) != "true" || again.header.Get("X-Order-Id") != "ord_1" || again.header.Get("Set-Cookie") != "" {
		t.Fatalf("replayed headers %v, want X-Order-Id ord_1 and no Set-Cookie", again.header)
	}
	if calls.Load() != 1 {
		t.Fatalf("upstream ran %d times", calls.Load())
	}
}
