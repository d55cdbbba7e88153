package chaos

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Proxy is a TCP proxy in the process between a client and a server — a
// database, a broker — that cuts every connection through it on demand. Point
// the client at Addr instead of the server; the client sees its connections
// reset, as after a network partition or a server restart, and must reconnect.
//
// The proxy keeps its listening socket for its whole life: while it is down it
// accepts a connection only to reset it at once. (Closing the socket and
// listening again after an outage, as it once did, let another test's socket
// take the port in between: the proxy never came back, and its clients waited
// for it for ever.)
type Proxy struct {
	name, upstream, addr string
	ln                   net.Listener
	cuts                 atomic.Int64
	wg                   sync.WaitGroup

	mu     sync.Mutex
	down   bool
	closed bool
	conns  map[net.Conn]struct{} // both ends of every connection through the proxy
}

// dialTimeout bounds the proxy's dial of the upstream for one connection.
const dialTimeout = 10 * time.Second

// NewProxy starts a proxy on a free port of 127.0.0.1 forwarding to upstream
// ("host:port").
func NewProxy(name, upstream string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("chaos: start proxy %s to %s: %w", name, upstream, err)
	}
	p := &Proxy{name: name, upstream: upstream, addr: ln.Addr().String(), ln: ln, conns: map[net.Conn]struct{}{}}
	p.wg.Go(p.serve)
	return p, nil
}

// Addr is the proxy's listening address, host:port.
func (p *Proxy) Addr() string { return p.addr }

// Cut closes every connection through the proxy and refuses new ones for down,
// then accepts connections again on the same address.
func (p *Proxy) Cut(down time.Duration) error {
	p.Down()
	time.Sleep(down)
	return p.Up()
}

// Down closes every connection through the proxy and refuses new ones until Up:
// an outage that lasts until the caller has seen what it waits for, where Cut's
// lasts a set time.
func (p *Proxy) Down() {
	p.mu.Lock()
	p.down = true
	conns := p.conns
	p.conns = map[net.Conn]struct{}{}
	p.mu.Unlock()
	for c := range conns {
		reset(c)
	}
	p.cuts.Add(1)
}

// Up accepts connections again on the same address, after Down. Its error is
// for a proxy that was closed.
func (p *Proxy) Up() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return fmt.Errorf("chaos: proxy %s on %s is closed", p.name, p.addr)
	}
	p.down = false
	return nil
}

// Cuts is how many times Cut (or Down) ran.
func (p *Proxy) Cuts() int { return int(p.cuts.Load()) }

// Close stops the proxy and closes its connections.
func (p *Proxy) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	conns := p.conns
	p.conns = map[net.Conn]struct{}{}
	p.mu.Unlock()
	_ = p.ln.Close()
	for c := range conns {
		reset(c)
	}
	p.wg.Wait()
}

func (p *Proxy) serve() {
	for {
		c, err := p.ln.Accept()
		if errors.Is(err, net.ErrClosed) {
			return
		}
		if err != nil { // out of descriptors, say: try again shortly
			time.Sleep(5 * time.Millisecond)
			continue
		}
		p.wg.Go(func() { p.pipe(c) })
	}
}

// pipe carries one connection to the upstream and back until either end
// closes it or the proxy cuts it.
func (p *Proxy) pipe(client net.Conn) {
	if !p.track(client) {
		reset(client) // down: refused
		return
	}
	up, err := net.DialTimeout("tcp", p.upstream, dialTimeout)
	if err != nil {
		p.untrack(client)
		reset(client)
		return
	}
	if !p.track(up) { // cut while dialling
		p.untrack(client)
		reset(client)
		reset(up)
		return
	}
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(up, client); done <- struct{}{} }()
	go func() { _, _ = io.Copy(client, up); done <- struct{}{} }()
	<-done // either end closed: close both, which ends the other copy
	p.untrack(client)
	p.untrack(up)
	_ = client.Close()
	_ = up.Close()
	<-done
}

// track records c as a connection through the proxy, unless the proxy is down
// or closed.
func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.down || p.closed {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
}

// reset closes c with a TCP reset, as a partition or a crashed server leaves it.
func reset(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}
