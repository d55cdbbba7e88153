package stream_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/idemhq/idem/internal/sqltest"
	"github.com/idemhq/idem/internal/testsvc"
	"github.com/idemhq/idem/stream"
)

// rawHub is the baseline: a plain WebSocket broadcast with no store, no seq, no
// acks and no replay (at-most-once push), built on the same library.
type rawHub struct {
	mu    sync.Mutex
	conns map[chan []byte]struct{}
}

func (h *rawHub) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	ws, err := websocket.Accept(w, r, nil)
	if err != nil {
		return
	}
	defer ws.CloseNow()
	ch := make(chan []byte, 1024)
	h.mu.Lock()
	h.conns[ch] = struct{}{}
	h.mu.Unlock()
	defer func() { h.mu.Lock(); delete(h.conns, ch); h.mu.Unlock() }()
	ctx := ws.CloseRead(r.Context())
	for {
		select {
		case m := <-ch:
			if ws.Write(ctx, websocket.MessageText, m) != nil {
				return
			}
		case <-ctx.Done():
			return
		}
	}
}

func (h *rawHub) broadcast(m []byte) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for ch := range h.conns {
		ch <- m
	}
}

// rawFrame is the baseline's frame for the i-th event: the same fields as idem's,
// stamped now.
func rawFrame(i int) []byte {
	m, _ := json.Marshal(map[string]any{"type": "event", "seq": i + 1, "at": time.Now(), "data": json.RawMessage(`{"n":1}`)})
	return m
}

// waitConnected waits until n clients are connected to the hub.
func (h *rawHub) waitConnected(b *testing.B, n int) {
	testsvc.Eventually(b, time.Minute, fmt.Sprintf("%d clients to connect", n), func() bool {
		h.mu.Lock()
		defer h.mu.Unlock()
		return len(h.conns) >= n
	})
}

// fanout starts k receivers and returns a function that waits until each has
// received n events, and the latencies seen (append time to receipt).
type receivers struct {
	mu       sync.Mutex
	received *sync.Cond // broadcast at every receipt
	got      []int      // events received, per receiver
	lats     []time.Duration
	stop     context.CancelFunc
	wg       sync.WaitGroup
}

func newReceivers(k int, stop context.CancelFunc) *receivers {
	r := &receivers{got: make([]int, k), stop: stop}
	r.received = sync.NewCond(&r.mu)
	return r
}

func (r *receivers) record(i int, at time.Time) {
	r.mu.Lock()
	r.got[i]++
	r.lats = append(r.lats, time.Since(at))
	r.mu.Unlock()
	r.received.Broadcast()
}

// wait blocks until every receiver has received n events: woken by each
// receipt, so the time measured ends with the last one.
func (r *receivers) wait(n int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for slices.ContainsFunc(r.got, func(g int) bool { return g < n }) {
		r.received.Wait()
	}
}

func (r *receivers) percentiles() (p50, p99 time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	slices.Sort(r.lats)
	if len(r.lats) == 0 {
		return 0, 0
	}
	return r.lats[len(r.lats)/2], r.lats[len(r.lats)*99/100]
}

func idemReceivers(b *testing.B, url string, k int) *receivers {
	ctx, cancel := context.WithCancel(context.Background())
	r := newReceivers(k, cancel)
	for i := range k {
		c, err := stream.NewClient(stream.ClientConfig{URL: url, Channel: "bench", ID: fmt.Sprint(i),
			OnEvent: func(e stream.Event) error { r.record(i, e.At); return nil }})
		if err != nil {
			b.Fatal(err)
		}
		r.wg.Go(func() { _ = c.Run(ctx) })
	}
	return r
}

func rawReceivers(b *testing.B, url string, k int) *receivers {
	ctx, cancel := context.WithCancel(context.Background())
	r := newReceivers(k, cancel)
	for i := range k {
		ws, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(url, "http"), nil)
		if err != nil {
			b.Fatal(err)
		}
		r.wg.Go(func() {
			defer ws.CloseNow()
			for {
				_, data, err := ws.Read(ctx)
				if err != nil {
					return
				}
				var e stream.Event
				_ = json.Unmarshal(data, &e)
				r.record(i, e.At)
			}
		})
	}
	return r
}

const benchClients = 100

// idemBench serves a Server on SQLite to benchClients receivers, connected and
// warm. Everything stops when b's run ends.
func idemBench(b *testing.B) (*stream.Server, *receivers) {
	store, err := stream.NewSQLStore(context.Background(), sqltest.SQLite(b), stream.SQLConfig{})
	if err != nil {
		b.Fatal(err)
	}
	srv, _ := stream.NewServer(store, stream.ServerConfig{AllowAnonymous: true})
	hs := httptest.NewServer(srv.Handler())
	b.Cleanup(hs.Close)
	b.Cleanup(func() { srv.Close() })
	r := idemReceivers(b, hs.URL, benchClients)
	b.Cleanup(func() { r.stop(); r.wg.Wait() })
	r.warm(b, srv)
	return srv, r
}

// rawBench serves the raw hub to benchClients receivers, connected. Everything
// stops when b's run ends.
func rawBench(b *testing.B) (*rawHub, *receivers) {
	h := &rawHub{conns: map[chan []byte]struct{}{}}
	hs := httptest.NewServer(h)
	b.Cleanup(hs.Close)
	r := rawReceivers(b, hs.URL, benchClients)
	b.Cleanup(func() { r.stop(); r.wg.Wait() })
	h.waitConnected(b, benchClients)
	return h, r
}

// BenchmarkFanout: events delivered per second to 100 clients of one channel, from
// one producer appending event after event, and from 16 producers at once (as
// concurrent requests or consumers would). idem: append to SQLite (concurrent
// appends share a commit), then push with seq, window and acks. raw: the same
// frames broadcast with no store (the at-most-once baseline).
func BenchmarkFanout(b *testing.B) {
	for _, producers := range []int{1, 16} {
		b.Run(fmt.Sprintf("idem/producers=%d", producers), func(b *testing.B) {
			srv, r := idemBench(b)
			b.ResetTimer()
			produce(b, producers, func(int) error {
				_, err := srv.Append(context.Background(), "bench", stream.Event{Type: "t", Data: json.RawMessage(`{"n":1}`)})
				return err
			})
			r.wait(b.N)
			b.ReportMetric(float64(b.N*benchClients)/b.Elapsed().Seconds(), "deliveries/s")
		})
		b.Run(fmt.Sprintf("raw/producers=%d", producers), func(b *testing.B) {
			h, r := rawBench(b)
			b.ResetTimer()
			produce(b, producers, func(i int) error { h.broadcast(rawFrame(i)); return nil })
			r.wait(b.N)
			b.ReportMetric(float64(b.N*benchClients)/b.Elapsed().Seconds(), "deliveries/s")
		})
	}
}

// produce calls send b.N times from producers goroutines, with i from 0 to b.N-1.
func produce(b *testing.B, producers int, send func(i int) error) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range producers {
		wg.Go(func() {
			for i := int(next.Add(1)) - 1; i < b.N; i = int(next.Add(1)) - 1 {
				if err := send(i); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
}

// warm waits until every receiver is connected and got one event, then resets
// the counts.
func (r *receivers) warm(b *testing.B, srv *stream.Server) {
	if _, err := srv.Append(context.Background(), "bench", stream.Event{Type: "warmup"}); err != nil {
		b.Fatal(err)
	}
	r.wait(1)
	r.mu.Lock()
	r.lats = r.lats[:0]
	clear(r.got)
	r.mu.Unlock()
}

// BenchmarkLatency: append-to-receive latency at 1,000 events/s to 100 clients
// for 3 s (b.N is ignored; the run is fixed), idem beside the raw broadcast.
func BenchmarkLatency(b *testing.B) {
	const rate, secs = 1000, 3
	run := func(b *testing.B, send func(i int), r *receivers) {
		tick := time.NewTicker(time.Second / rate)
		defer tick.Stop()
		b.ResetTimer()
		for i := range rate * secs {
			<-tick.C
			send(i)
		}
		r.wait(rate * secs)
		p50, p99 := r.percentiles()
		b.ReportMetric(float64(p50.Microseconds()), "p50-µs")
		b.ReportMetric(float64(p99.Microseconds()), "p99-µs")
	}
	b.Run("idem", func(b *testing.B) {
		srv, r := idemBench(b)
		run(b, func(int) {
			_, _ = srv.Append(context.Background(), "bench", stream.Event{Type: "t", Data: json.RawMessage(`{"n":1}`)})
		}, r)
	})
	b.Run("raw", func(b *testing.B) {
		h, r := rawBench(b)
		run(b, func(i int) { h.broadcast(rawFrame(i)) }, r)
	})
}

// BenchmarkConnected10k holds 10,000 idle clients (one channel each, as per-user
// streams would be) and reports the server's memory per connection, beside the
// raw broadcast hub holding as many. The clients run in a child process, so each
// side stays under the file descriptor limit. b.N is ignored.
func BenchmarkConnected10k(b *testing.B) {
	const n = 10000
	for _, mode := range []string{"idem", "raw"} {
		b.Run(mode, func(b *testing.B) {
			var h http.Handler = &rawHub{conns: map[chan []byte]struct{}{}}
			path := "/"
			if mode == "idem" {
				store, err := stream.NewSQLStore(context.Background(), sqltest.SQLite(b), stream.SQLConfig{})
				if err != nil {
					b.Fatal(err)
				}
				srv, _ := stream.NewServer(store, stream.ServerConfig{AllowAnonymous: true, Heartbeat: time.Minute, MaxConnections: -1})
				defer srv.Close()
				h, path = srv.Handler(), "/stream"
			}
			hs := httptest.NewServer(h)
			defer hs.Close()
			runtime.GC()
			var before runtime.MemStats
			runtime.ReadMemStats(&before)
			goroutines := runtime.NumGoroutine()

			cmd := exec.Command(os.Args[0], "-test.run=^TestHelperStreamClients$", "-test.v")
			cmd.Env = append(os.Environ(), "IDEM_STREAM_HELPER_URL="+hs.URL+path, "IDEM_STREAM_HELPER_N="+strconv.Itoa(n),
				"IDEM_STREAM_HELPER_MODE="+mode)
			out, _ := cmd.StdoutPipe()
			if err := cmd.Start(); err != nil {
				b.Fatal(err)
			}
			defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
			sc := bufio.NewScanner(out)
			connected := false
			for sc.Scan() {
				if strings.HasPrefix(sc.Text(), "connected ") {
					connected = true
					break
				}
			}
			if !connected {
				b.Fatal("the client process did not connect its clients")
			}
			// The last connections' setup on this side (their reader goroutines start
			// after the ready frame) has no hook to wait for: a pause of real time.
			time.Sleep(500 * time.Millisecond)
			runtime.GC()
			var after runtime.MemStats
			runtime.ReadMemStats(&after)
			perConn := float64(after.HeapInuse+after.StackInuse-before.HeapInuse-before.StackInuse) / n
			b.ReportMetric(perConn/1024, "KiB/conn")
			b.ReportMetric(float64(runtime.NumGoroutine()-goroutines)/n, "goroutines/conn")
		})
	}
}

// TestHelperStreamClients is the client process of BenchmarkConnected10k: it
// connects N clients, each to its own channel, waits for each one's ready, prints
// "connected N" and holds them until killed.
func TestHelperStreamClients(t *testing.T) {
	url := os.Getenv("IDEM_STREAM_HELPER_URL")
	if url == "" {
		t.Skip("run by BenchmarkConnected10k")
	}
	n, _ := strconv.Atoi(os.Getenv("IDEM_STREAM_HELPER_N"))
	var wg sync.WaitGroup
	sem := make(chan struct{}, 64)
	conns := make([]*websocket.Conn, n)
	for i := range n {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			ws, _, err := websocket.Dial(context.Background(), "ws"+strings.TrimPrefix(url, "http"), nil)
			if err != nil {
				t.Error(err)
				return
			}
			if os.Getenv("IDEM_STREAM_HELPER_MODE") == "idem" {
				_ = ws.Write(context.Background(), websocket.MessageText, []byte(fmt.Sprintf(`{"type":"hello","channel":"user:%d"}`, i)))
				if _, _, err := ws.Read(context.Background()); err != nil { // ready
					t.Error(err)
					return
				}
			}
			conns[i] = ws
			go func() { // keep reading, so pings are answered
				for {
					if _, _, err := ws.Read(context.Background()); err != nil {
						return
					}
				}
			}()
		})
	}
	wg.Wait()
	fmt.Printf("connected %d\n", n)
	select {}
}
