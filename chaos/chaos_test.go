package chaos

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemhq/idem/idemhttp"
)

func TestInjectorIsSeededAndHitsItsRate(t *testing.T) {
	faults := []Fault{{Kind: "a", Weight: 3}, {Kind: "b", Weight: 1}}
	one, two := NewInjector(42, 0.25), NewInjector(42, 0.25)
	for i := range 10000 {
		id := "op" + string(rune('a'+i%26)) + strings.Repeat("x", i%7)
		if f1, f2 := one.Roll(id, i, faults), two.Roll(id, i, faults); f1 != f2 {
			t.Fatalf("op %d: %q then %q with one seed", i, f1, f2)
		}
	}
	if got := float64(one.Faulted()) / float64(one.Ops()); got < 0.22 || got > 0.28 {
		t.Fatalf("faulted %.3f of operations, want about 0.25", got)
	}
	c := one.Counts()
	if c["a"] < 2*c["b"] {
		t.Fatalf("counts %v do not follow the weights 3:1", c)
	}
	capped := NewInjector(1, 1)
	for i := range 100 {
		capped.Roll("x", i, []Fault{{Kind: "rare", Weight: 1, Max: 3}})
	}
	if n := capped.Counts()["rare"]; n != 3 {
		t.Fatalf("a fault capped at 3 was injected %d times", n)
	}
}

// Faults with a Min are drawn first: a rare kind is injected within the first
// hits, not by luck, and the weights rule once every Min is met. The hit rate is
// the same either way.
func TestInjectorMin(t *testing.T) {
	t.Parallel()
	faults := []Fault{{Kind: "common", Weight: 100}, {Kind: "rare", Weight: 0.01, Min: 2}, {Kind: "capped", Weight: 0.01, Min: 1, Max: 1}}
	in := NewInjector(3, 1)
	var first []string
	for i := range 3 {
		first = append(first, in.Roll(fmt.Sprint("op-", i), 1, faults))
	}
	if c := in.Counts(); c["rare"] != 2 || c["capped"] != 1 {
		t.Fatalf("first three hits %v, want rare twice and capped once (their Mins) before any common", first)
	}
	for i := range 1000 {
		in.Roll(fmt.Sprint("later-", i), 1, faults)
	}
	if c := in.Counts(); c["capped"] != 1 || c["rare"] > 10 || c["common"] < 980 {
		t.Fatalf("counts %v after the Mins: want the weights to rule (and capped at its Max)", c)
	}
	half := NewInjector(5, 0.5)
	for i := range 4000 {
		half.Roll(fmt.Sprint("op-", i), 1, faults)
	}
	if got := float64(half.Faulted()) / float64(half.Ops()); got < 0.45 || got > 0.55 {
		t.Fatalf("faulted %.3f of operations with Mins, want about 0.5", got)
	}
}

// After Calm an injector hits nothing, even at rate 1, and still counts operations:
// verify's last phase, after the clock jumps past retention, runs without faults.
func TestInjectorCalm(t *testing.T) {
	t.Parallel()
	in := NewInjector(7, 1)
	faults := []Fault{{Kind: FaultDuplicateDelivery, Weight: 1}}
	if in.Roll("before", 1, faults) == "" {
		t.Fatal("rate 1 hit nothing before Calm")
	}
	in.Calm()
	for i := range 100 {
		if f := in.Roll(fmt.Sprint("op-", i), 1, faults); f != "" {
			t.Fatalf("operation %d hit by %s after Calm", i, f)
		}
	}
	if in.Ops() != 101 || in.Faulted() != 1 {
		t.Fatalf("ops %d, faulted %d; want 101 and 1", in.Ops(), in.Faulted())
	}
}

func TestClockJumps(t *testing.T) {
	var c Clock
	before := c.Now()
	c.Jump(time.Hour)
	if d := c.Now().Sub(before); d < time.Hour || d > time.Hour+time.Minute {
		t.Fatalf("after a jump of 1h the clock moved %v", d)
	}
	if off := c.Jump(-2 * time.Hour); off != -time.Hour {
		t.Fatalf("offset %v, want -1h", off)
	}
}

// A cut resets the connections through the proxy; new ones go through afterwards.
func TestProxyCutResetsConnections(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() { // echo server
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { _, _ = io.Copy(c, c); c.Close() }()
		}
	}()
	p, err := NewProxy("echo", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	echo := func(c net.Conn) (string, error) {
		if _, err := c.Write([]byte("ping\n")); err != nil {
			return "", err
		}
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		return bufio.NewReader(c).ReadString('\n')
	}
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got, err := echo(c); err != nil || got != "ping\n" {
		t.Fatalf("through the proxy: %q, %v", got, err)
	}
	if err := p.Cut(10 * time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if _, err := echo(c); err == nil {
		t.Fatal("a connection survived the cut")
	}
	c2, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatalf("dial after the cut: %v", err)
	}
	defer c2.Close()
	if got, err := echo(c2); err != nil || got != "ping\n" {
		t.Fatalf("after the cut: %q, %v", got, err)
	}
	if p.Cuts() != 1 {
		t.Fatalf("Cuts() = %d", p.Cuts())
	}
}

// A dropped response reaches the server and fails at the client; a duplicate
// reaches the server twice.
func TestTransportFaults(t *testing.T) {
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusCreated)
	}))
	defer srv.Close()
	for _, tc := range []struct {
		fault   string
		hits    int64
		wantErr bool
	}{{FaultDropResponse, 1, true}, {FaultDuplicateRequest, 2, false}} {
		hits.Store(0)
		tr := &Transport{Injector: NewInjector(1, 1), Faults: []Fault{{Kind: tc.fault, Weight: 1}}}
		req, _ := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader("body"))
		req.Header.Set("Idempotency-Key", "k-"+tc.fault)
		resp, err := tr.RoundTrip(req)
		if (err != nil) != tc.wantErr {
			t.Fatalf("%s: err %v, want error %v", tc.fault, err, tc.wantErr)
		}
		if resp != nil {
			resp.Body.Close()
		}
		if hits.Load() != tc.hits {
			t.Fatalf("%s: the server saw %d requests, want %d", tc.fault, hits.Load(), tc.hits)
		}
	}
}

// Transport identifies requests by the header idemhttp sets, without importing it.
func TestHeaderKeyIsIdemhttps(t *testing.T) {
	t.Parallel()
	if headerKey != idemhttp.HeaderKey {
		t.Fatalf("headerKey = %q, idemhttp.HeaderKey = %q", headerKey, idemhttp.HeaderKey)
	}
}
