package main

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// The memory store of the gateway is bounded (memory:?max_bytes=): once its records
// fill the budget, requests with new keys get 503 and do not reach the upstream, while
// every key it remembers keeps replaying: nothing is evicted to make room.
func TestServeMemoryStoreIsBounded(t *testing.T) {
	t.Parallel()
	var runs atomic.Int64
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) { // /slow: this handler
		runs.Add(1)
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, strings.Repeat("x", 1000))
	}, nil)
	g := startGateway(t, up.URL, "--store", "memory:?max_bytes=64KiB")
	body := strings.Repeat("x", 1000)
	stored, full := 0, reply{}
	for i := 0; i < 10000; i++ {
		r := send(t, "POST", "http://"+g.addr+"/slow", fmt.Sprintf("k-%d", i), body)
		if r.status == http.StatusServiceUnavailable {
			full = r
			break
		}
		if r.status != http.StatusCreated {
			t.Fatalf("request %d: %d %s", i, r.status, r.body)
		}
		stored++
	}
	switch {
	case full.status == 0:
		t.Fatalf("10000 requests with new keys of 1000 bytes each fit in a 64 KiB memory store\n%s", g.stderr)
	case full.header.Get("Retry-After") == "":
		t.Fatalf("503 of a full store has no Retry-After: %s", full.body)
	case runs.Load() != int64(stored):
		t.Fatalf("the upstream ran %d times for %d stored keys: a refused key reached it", runs.Load(), stored)
	}
	for i := 0; i < stored; i++ {
		r := send(t, "POST", "http://"+g.addr+"/slow", fmt.Sprintf("k-%d", i), body)
		if r.status != http.StatusCreated || r.header.Get("Idempotent-Replayed") != "true" || string(r.body) != body {
			t.Fatalf("key %d of %d stored before the store filled: %d replayed=%q; want its stored response",
				i, stored, r.status, r.header.Get("Idempotent-Replayed"))
		}
	}
	if runs.Load() != int64(stored) {
		t.Fatalf("replays ran the upstream: %d runs for %d keys", runs.Load(), stored)
	}
}

// --max-conns bounds the client connections the gateway holds: with two connections
// open (and idle), a third is not served until one of them closes.
func TestServeMaxConnsBoundsConnections(t *testing.T) {
	t.Parallel()
	up := newUpstream(t, nil, nil)
	g := startGateway(t, up.URL, "--store", "memory:", "--max-conns", "2")
	var held []net.Conn
	for range 2 {
		c, err := net.Dial("tcp", g.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		// A request without its final CRLF: the gateway holds the connection, reading.
		if _, err := io.WriteString(c, "GET /x HTTP/1.1\r\nHost: gw\r\n"); err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
	}
	client := &http.Client{Timeout: 500 * time.Millisecond, Transport: &http.Transport{DisableKeepAlives: true}}
	if resp, err := client.Get("http://" + g.addr + "/x"); err == nil {
		resp.Body.Close()
		t.Fatalf("a third connection was served (%s) while --max-conns 2 were open", resp.Status)
	}
	held[0].Close()
	client.Timeout = 30 * time.Second
	resp, err := client.Get("http://" + g.addr + "/x")
	if err != nil {
		t.Fatalf("after one of the two connections closed, a new one was not served: %v\n%s", err, g.stderr)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET through the gateway: %s", resp.Status)
	}
}
