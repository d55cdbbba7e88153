package chaos

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/rs/zerolog"
)

// Proxy is a TCP proxy in the process (Shopify's toxiproxy) between a client and
// a server — a database, a broker — that cuts every connection through it on
// demand. Point the client at Addr instead of the server; the client sees its
// connections reset, as after a network partition or a server restart, and must
// reconnect.
type Proxy struct {
	mu    sync.Mutex
	p     *toxiproxy.Proxy
	addr  string
	cuts  atomic.Int64
	close sync.Once
}

// NewProxy starts a proxy on a free port of 127.0.0.1 forwarding to upstream
// ("host:port").
func NewProxy(name, upstream string) (*Proxy, error) {
	srv := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop())
	p := toxiproxy.NewProxy(srv, name, "127.0.0.1:0", upstream)
	if err := p.Start(); err != nil {
		return nil, fmt.Errorf("chaos: start proxy %s to %s: %w", name, upstream, err)
	}
	return &Proxy{p: p, addr: p.Listen}, nil
}

// Addr is the proxy's listening address, host:port.
func (p *Proxy) Addr() string { return p.addr }

// Cut closes every connection through the proxy and refuses new ones for down,
// then accepts connections again on the same address.
func (p *Proxy) Cut(down time.Duration) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stop()
	time.Sleep(down)
	return p.start()
}

// Down closes every connection through the proxy and refuses new ones until Up:
// an outage that lasts until the caller has seen what it waits for, where Cut's
// lasts a set time.
func (p *Proxy) Down() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stop()
}

// Up accepts connections again on the same address, after Down.
func (p *Proxy) Up() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.start()
}

func (p *Proxy) stop() {
	p.p.Stop()
	p.cuts.Add(1)
}

func (p *Proxy) start() error {
	if err := p.p.Start(); err != nil {
		return fmt.Errorf("chaos: restart proxy %s on %s: %w", p.p.Name, p.addr, err)
	}
	return nil
}

// Cuts is how many times Cut (or Down) ran.
func (p *Proxy) Cuts() int { return int(p.cuts.Load()) }

// Close stops the proxy and closes its connections.
func (p *Proxy) Close() {
	p.close.Do(func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		p.p.Stop()
	})
}
