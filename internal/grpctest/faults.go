package grpctest

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc"

	"github.com/idemhq/idem/chaos"
	"github.com/idemhq/idem/internal/orderspb"
)

// OrdersOf returns the ids of the orders recorded for customer, in no order.
func (o *Orders) OrdersOf(customer string) []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	var ids []string
	for id, ord := range o.orders {
		if ord.GetCustomer() == customer {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}

// Dropper loses responses on the wire: chained outermost on the server, it lets
// the handler (and the idempotency interceptor under it) run, then, for the
// first call of each customer that Drop picks, cuts every connection through
// Proxy (the clients' way in) and restores it before returning, so the response
// is written to a dead connection, as after a network failure between server and
// client. The client sees UNAVAILABLE with no response, which a retry policy
// retries.
type Dropper struct {
	// Drop picks the customers whose first call loses its response.
	Drop  func(customer string) bool
	proxy atomic.Pointer[chaos.Proxy]
	mu    sync.Mutex
	seen  map[string]bool
	lost  map[string]bool
	err   error
}

// SetProxy sets the proxy the clients reach the server through; the server
// must be serving before the proxy can be made, so it is set after.
func (d *Dropper) SetProxy(p *chaos.Proxy) { d.proxy.Store(p) }

// Dropped reports whether the response of customer's first call was lost.
func (d *Dropper) Dropped(customer string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.lost[customer]
}

// Err is the error of restoring the proxy after a drop, if one failed.
func (d *Dropper) Err() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.err
}

// Interceptor is the server interceptor to chain first (outermost).
func (d *Dropper) Interceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		resp, err := handler(ctx, req)
		r, ok := req.(*orderspb.PlaceOrderRequest)
		if !ok {
			return resp, err
		}
		c := r.GetCustomer()
		d.mu.Lock()
		if d.seen == nil {
			d.seen, d.lost = map[string]bool{}, map[string]bool{}
		}
		drop := !d.seen[c] && d.Drop != nil && d.Drop(c)
		d.seen[c] = true
		d.lost[c] = d.lost[c] || drop
		d.mu.Unlock()
		if p := d.proxy.Load(); drop && p != nil {
			p.Down() // the connection is gone before the response is written
			if uerr := p.Up(); uerr != nil {
				d.mu.Lock()
				d.err = uerr // the proxy's port was taken: later calls will fail
				d.mu.Unlock()
			}
		}
		return resp, err
	}
}

// Arrivals counts the PlaceOrder calls (retries and hedged copies included)
// that reach a server, per customer, so a handler can wait until every copy of
// a call has arrived: progress, not time. Chain Interceptor first (outermost).
// Add counts anything else a test waits for (answers of some status, say).
type Arrivals struct {
	mu      sync.Mutex
	n       map[string]int
	changed chan struct{} // closed and replaced at each arrival
}

// Interceptor is the server interceptor that counts.
func (a *Arrivals) Interceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if r, ok := req.(*orderspb.PlaceOrderRequest); ok {
			a.Add(r.GetCustomer())
		}
		return handler(ctx, req)
	}
}

// Add counts one arrival of customer.
func (a *Arrivals) Add(customer string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.init()
	a.n[customer]++
	close(a.changed)
	a.changed = make(chan struct{})
}

func (a *Arrivals) init() {
	if a.n == nil {
		a.n, a.changed = map[string]int{}, make(chan struct{})
	}
}

// Count is how many calls of customer arrived.
func (a *Arrivals) Count(customer string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.n[customer]
}

// Await blocks until n calls of customer have arrived, or ctx ends (its error).
func (a *Arrivals) Await(ctx context.Context, customer string, n int) error {
	for {
		a.mu.Lock()
		a.init()
		got, changed := a.n[customer], a.changed
		a.mu.Unlock()
		if got >= n {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// NoRetryServiceConfig is RetryServiceConfig without its retryPolicy: for a
// connection on which a test wants to see every status the server answers, or
// hedges (a method has a retry or a hedging policy, never both).
const NoRetryServiceConfig = `{
  "methodConfig": [{
    "name": [{"service": "idem.orders.v1.Orders"}],
    "waitForReady": true
  }]
}`
