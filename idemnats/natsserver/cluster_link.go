package natsserver

import (
	"io"
	"net"
	"sync"
	"time"
)

// link is a loopback TCP forwarder that the routes between two nodes of a
// Cluster go through, so they can be cut. A cut link closes its connections and
// closes every new one at once (the dialler sees its route drop, as on a
// partition) until it is restored. A link without an upstream closes every
// connection: the address nodes advertise, so gossip never opens a route that
// bypasses the links.
//
// It is the cluster's own, not chaos.Proxy: natsserver must not depend on
// package chaos, and a route cut must hold for as long as the test says while both
// directions of a pair are cut together.
type link struct {
	ln       net.Listener
	upstream string

	mu    sync.Mutex
	down  bool
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

func newLink(upstream string) (*link, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	l := &link{ln: ln, upstream: upstream, conns: map[net.Conn]struct{}{}}
	l.wg.Add(1)
	go l.accept()
	return l, nil
}

func (l *link) addr() string { return l.ln.Addr().String() }

func (l *link) accept() {
	defer l.wg.Done()
	for {
		in, err := l.ln.Accept()
		if err != nil {
			return // closed
		}
		l.mu.Lock()
		down := l.down
		l.mu.Unlock()
		if down || l.upstream == "" {
			in.Close()
			continue
		}
		l.wg.Add(1)
		go l.forward(in)
	}
}

// forward pipes in to the upstream until either side closes or the link is cut.
func (l *link) forward(in net.Conn) {
	defer l.wg.Done()
	out, err := net.DialTimeout("tcp", l.upstream, 2*time.Second)
	if err != nil {
		in.Close()
		return
	}
	if !l.track(in, out) {
		in.Close()
		out.Close()
		return
	}
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		dst.Close()
		src.Close()
		done <- struct{}{}
	}
	go pipe(out, in)
	go pipe(in, out)
	<-done
	<-done
	l.mu.Lock()
	delete(l.conns, in)
	delete(l.conns, out)
	l.mu.Unlock()
}

// track registers a forwarded pair, unless the link was cut meanwhile.
func (l *link) track(in, out net.Conn) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.down {
		return false
	}
	l.conns[in], l.conns[out] = struct{}{}, struct{}{}
	return true
}

// cut takes the link down (closing its connections) or brings it back up.
func (l *link) cut(down bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.down = down
	if down {
		for c := range l.conns {
			c.Close()
		}
	}
}

// close stops the link and waits for its goroutines.
func (l *link) close() {
	l.ln.Close()
	l.cut(true)
	l.wg.Wait()
}
