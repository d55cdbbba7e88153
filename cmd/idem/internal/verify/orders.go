package verify

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/chaos"
	"github.com/idemhq/idem/idemhttp"
	"github.com/idemhq/idem/idemkey"
	"github.com/idemhq/idem/outbox"
)

// The client → HTTP API → order service → outbox boundary: the order service,
// the seeded orders and the client fleet that places them.

type orderRequest struct {
	Customer string `json:"customer"`
	Amount   int64  `json:"amount"`
}

type orderEvent struct {
	OrderID  string `json:"order_id"`
	Customer string `json:"customer"`
	Amount   int64  `json:"amount"`
}

// orderAPI is the order service behind one API (HTTP, gRPC) and the clients
// that place orders on it: the client → API boundary.
type orderAPI interface {
	// client returns a client of the API; faulty puts it behind the fault
	// injectors of the boundary.
	client(faulty bool) (orderClient, error)
	close()
}

// orderClient places orders on the order service.
type orderClient interface {
	// place places in's order with in's key, retrying with the same key, and
	// sets in.accepted when the service accepted it. Before the first attempt it
	// may send a copy past its deadline (FaultPastDeadline, FaultGRPCPastDeadline).
	place(ctx context.Context, in *intent)
	// close waits for the copies place sent on their own and closes the client.
	close()
}

// startAPI starts the order service behind the flow's API.
func (r *run) startAPI() (orderAPI, error) {
	if r.f.API == APIGRPC {
		return r.startGRPC()
	}
	return r.startHTTP()
}

// httpAPI is the order service over HTTP, behind idemhttp.AtomicMiddleware.
type httpAPI struct {
	r    *run
	srvs []*http.Server
	urls []string // one per gateway
}

func (a *httpAPI) close() {
	for _, srv := range a.srvs {
		srv.Close()
	}
}

func (a *httpAPI) client(faulty bool) (orderClient, error) {
	c := &http.Client{Transport: &idemhttp.Transport{MaxAttempts: 8, MinBackoff: 2 * time.Millisecond, MaxBackoff: 100 * time.Millisecond, Logger: a.r.log}}
	if faulty {
		c = a.r.client()
	}
	return &httpClient{r: a.r, c: c, urls: a.urls}, nil
}

type httpClient struct {
	r    *run
	c    *http.Client
	urls []string
}

func (c *httpClient) place(ctx context.Context, in *intent) { c.r.place(ctx, c.c, c.urls, in) }
func (c *httpClient) close()                                { c.c.CloseIdleConnections() }

// startHTTP starts the order service's gateway, or two with Flow.Skew (two
// middleware instances on the same store, on clocks Skew apart; the clients
// send each order's successive requests to them in turn).
func (r *run) startHTTP() (orderAPI, error) {
	gateways := 1
	if r.f.Skew > 0 {
		gateways = 2
	}
	a := &httpAPI{r: r}
	for i := range gateways {
		off := time.Duration(0)
		if r.f.Skew > 0 {
			off = r.f.skewOffset(i)
			r.skewNode(fmt.Sprintf("gateway %d", i+1), off, "idemhttp: key ages (retention) and request deadlines")
		}
		srv, url, err := r.startGateway(r.flowAt(off))
		if err != nil {
			a.close()
			return nil, err
		}
		a.srvs, a.urls = append(a.srvs, srv), append(a.urls, url)
	}
	return a, nil
}

// startGateway starts one gateway of the order service, its middleware on now.
func (r *run) startGateway(now func() time.Time) (*http.Server, string, error) {
	handler := http.Handler(http.HandlerFunc(r.placeOrder))
	if !r.f.Unsafe {
		// The middleware judges key ages and deadlines on the flow's clock, the one
		// that drives the store's expiry (and jumps), off by the gateway's skew.
		mw, err := idemhttp.AtomicMiddleware(r.txdb, r.f.Store, idemhttp.Config{
			RequireKey: true, Retention: r.f.Retention, Registerer: r.reg, Logger: r.log, Now: now,
		})
		if err != nil {
			return nil, "", err
		}
		handler = mw(handler)
	}
	mux := http.NewServeMux()
	mux.Handle("POST /orders", handler)
	counted := http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		// A request sent past its deadline carries a key of its own, but is a copy
		// of its order's request: it is counted under the order's key.
		key := req.Header.Get(headerOrder)
		if key == "" {
			key = req.Header.Get(idemhttp.HeaderKey)
		}
		r.received.Add(key)
		mux.ServeHTTP(w, req)
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, "", err
	}
	srv := &http.Server{Handler: counted, ReadHeaderTimeout: 10 * time.Second, ErrorLog: slog.NewLogLogger(r.log.Handler(), slog.LevelWarn)}
	go func() { _ = srv.Serve(ln) }()
	return srv, "http://" + ln.Addr().String() + "/orders", nil
}

// placeOrder is the order service over HTTP.
func (r *run) placeOrder(w http.ResponseWriter, req *http.Request) {
	r.executions.Add(1)
	var in orderRequest
	if err := json.NewDecoder(req.Body).Decode(&in); err != nil || in.Amount <= 0 || in.Customer == "" {
		http.Error(w, "body: want {\"customer\": non-empty, \"amount\": > 0}", http.StatusBadRequest)
		return
	}
	tx, _ := idemhttp.TxFrom[*sql.Tx](req.Context())
	id, err := r.writeOrder(req.Context(), tx, req.Header.Get(idemhttp.HeaderKey), in)
	if err != nil {
		http.Error(w, "order service: "+err.Error(), http.StatusServiceUnavailable)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	_ = json.NewEncoder(w).Encode(map[string]string{"order_id": id})
}

// writeOrder is the order service, whatever its API: the order placed under
// key and its event, in one transaction: tx (the idempotency middleware's or
// interceptor's) or, when tx is nil (unsafe mode), its own. It returns the
// order's id.
func (r *run) writeOrder(ctx context.Context, tx *sql.Tx, key string, in orderRequest) (string, error) {
	id := idemkey.NewV7()
	write := func(tx *sql.Tx) error {
		if _, err := r.txdb.Querier(tx).Exec(ctx, "INSERT INTO "+tableOrders+" (id, request_key, customer, amount, created_at) VALUES ($1, $2, $3, $4, $5)",
			id, key, in.Customer, in.Amount, r.now().UnixNano()); err != nil {
			return err
		}
		payload, _ := json.Marshal(orderEvent{OrderID: id, Customer: in.Customer, Amount: in.Amount})
		msg := idem.Message{ID: id, Topic: r.f.Broker.Topic(), Payload: payload}
		if r.lateEvent(key) {
			// Dated deadlineBudget back on the service's clock: passed on the
			// consumer's however far the flow's clock has jumped (±10 min).
			msg = outbox.WithDeadline(msg, r.now().Add(-deadlineBudget))
		}
		var err error
		if r.queue != nil {
			_, err = r.queue.q.EnqueueTx(ctx, tx, msg)
		} else {
			_, err = r.ob.EnqueueTx(ctx, tx, msg)
		}
		return err
	}
	if tx != nil {
		return id, write(tx)
	}
	return id, r.txdb.InTx(ctx, write)
}

// lateEvent reports whether the order placed under key has its event written
// with a deadline that has passed (FaultMessagePastDeadline): a tenth of the fault
// rate of orders, drawn from the seed and the key, so that every execution of
// the order's request (a retry after a rollback, a copy without idem) and the
// checker agree on it.
func (r *run) lateEvent(key string) bool {
	if key == "" || r.f.FaultRate <= 0 {
		return false
	}
	return rand.New(rand.NewPCG(uint64(r.f.Seed)^0xdead1e, fnv64(key))).Float64() < r.f.FaultRate*0.1
}

// headerOrder names, on a request sent past its deadline, the key of the order it
// is a copy of, so the server counts it with that order's attempts.
const headerOrder = "X-Verify-Order"

// deadlineBudget is how long after it is sent a client's request stays wanted:
// its Idem-Deadline, on the flow's clock. It is longer than any difference two
// readings of that clock can show (clock jumps stay within ±10 min), so only a
// request sent with a passed deadline (FaultPastDeadline) is refused for it.
const deadlineBudget = 30 * time.Minute

// intents derives the orders from the seed: keys, customers and amounts. The keys
// are UUIDv7s, so the server can tell a retry that comes after their retention:
// dated an hour before the run's hour on the flow's clock (clear of clock jumps
// backwards, which would make them look dated in the future), with the rest of
// their bits from the seed. The seed fixes which attempt a fault hits (faults are
// drawn by key) for runs started within the same hour.
func (r *run) intents() []intent {
	rng := rand.New(rand.NewPCG(uint64(r.f.Seed), 0x1de))
	keyTime := r.now().Truncate(time.Hour).Add(-time.Hour)
	out := make([]intent, r.f.Orders)
	for i := range out {
		out[i] = intent{key: timedKey(rng, keyTime), customer: fmt.Sprintf("c%03d", rng.IntN(500)), amount: 1 + rng.Int64N(1000)}
	}
	return out
}

// timedKey is a UUIDv7 dated t, its random bits from rng.
func timedKey(rng *rand.Rand, t time.Time) string {
	id, _ := uuid.NewRandomFromReader(rngReader{rng})
	ms := uint64(t.UnixMilli())
	for i := range 6 {
		id[i] = byte(ms >> (40 - 8*i))
	}
	id[6] = 0x70 | id[6]&0x0f // version 7; the variant is already RFC 9562's
	return id.String()
}

func (r *run) client() *http.Client {
	base := &http.Transport{MaxIdleConnsPerHost: r.f.Clients * 2, ResponseHeaderTimeout: 30 * time.Second}
	ct := &chaos.Transport{Base: base, Injector: r.inj, Faults: r.clientFaults(chaos.FaultDropResponse, chaos.FaultDuplicateRequest), OnFault: r.onFault}
	return &http.Client{Transport: &idemhttp.Transport{Base: ct, MaxAttempts: 8, MinBackoff: 2 * time.Millisecond,
		MaxBackoff: 200 * time.Millisecond, MaxElapsed: time.Minute, Logger: r.log}}
}

// clientFaults are the faults of the client → API boundary, drop and dup naming
// the API's dropped response and duplicate request, with the flow's clock jumps
// and connection cuts.
func (r *run) clientFaults(drop, dup string) []chaos.Fault {
	faults := []chaos.Fault{{Kind: drop, Weight: 4}, {Kind: dup, Weight: 3}}
	if r.f.Clock != nil {
		faults = append(faults, chaos.Fault{Kind: FaultClockJump, Weight: 0.2})
	}
	if r.f.DBProxy != nil {
		faults = append(faults, chaos.Fault{Kind: FaultDBCut, Weight: 0.3})
	}
	if r.f.Broker.Proxy() != nil {
		faults = append(faults, chaos.Fault{Kind: FaultBrokerCut, Weight: 0.3})
	}
	return faults
}

// placeAll runs the client fleet: each order is placed with its own key, retried
// by the API's client (idemhttp.Transport, grpc-go's retry policy) and, when that
// gives up, by the client itself with the same key, up to 5 times.
func (r *run) placeAll(ctx context.Context, api orderAPI, intents []intent) error {
	client, err := api.client(true)
	if err != nil {
		return err
	}
	defer client.close()
	next := make(chan int)
	var wg sync.WaitGroup
	for range r.f.Clients {
		wg.Go(func() {
			for i := range next {
				client.place(ctx, &intents[i])
				if intents[i].accepted {
					r.accepted.Add(1)
				}
				if r.placed.Add(1) == int64(len(intents)/2) && r.f.DBProxy != nil {
					// One cut at half way whatever the draws (which follow the keys, and
					// so the hour): every run behind the proxy meets a cut at least once.
					r.inj.Count(FaultDBCut)
					r.cut(r.f.DBProxy, FaultDBCut)
				}
			}
		})
	}
	for i := range intents {
		select {
		case next <- i:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
	}
	close(next)
	wg.Wait()
	return nil
}

// place places one order through the gateways at urls, each new request of the
// order to the next gateway (its first one drawn from its key).
func (r *run) place(ctx context.Context, client *http.Client, urls []string, in *intent) (id string, ok bool) {
	body, _ := json.Marshal(orderRequest{Customer: in.customer, Amount: in.amount})
	next := fnv64(in.key)
	newRequest := func(key string, deadline time.Time) (*http.Request, error) {
		url := urls[next%uint64(len(urls))]
		next++
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
		if err != nil {
			return nil, err
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set(idemhttp.HeaderKey, key)
		// The client's clock is the flow's: its deadline is set here rather than by
		// the Transport, which reads the wall clock.
		req.Header.Set(idem.HeaderDeadline, idem.FormatDeadline(deadline))
		return req, nil
	}
	if r.inj.RollScaled("deadline "+in.key, 0, 0.1, pastDeadlineFaults) != "" {
		r.sendPastDeadline(client, in, newRequest)
	}
	for attempt := 0; attempt < 5 && ctx.Err() == nil; attempt++ {
		req, err := newRequest(in.key, r.now().Add(deadlineBudget))
		if err != nil {
			return "", false
		}
		resp, err := client.Do(req)
		if err != nil {
			continue
		}
		var out struct {
			OrderID string `json:"order_id"`
		}
		derr := json.NewDecoder(resp.Body).Decode(&out)
		resp.Body.Close()
		if resp.StatusCode == http.StatusCreated && derr == nil {
			if !in.accepted {
				in.accepted, in.orderID = true, out.OrderID
			}
			return out.OrderID, true
		}
		if resp.StatusCode == http.StatusGone {
			return "", false // a late retry, refused: its order was placed long ago
		}
		if resp.StatusCode < 500 && resp.StatusCode != http.StatusConflict && resp.StatusCode != http.StatusTooManyRequests {
			r.log.Warn("verify: order refused", "key", in.key, "status", resp.StatusCode)
			return "", false
		}
	}
	return "", false
}

// pastDeadlineFaults is the fault place rolls for each order before placing it.
var pastDeadlineFaults = []chaos.Fault{{Kind: FaultPastDeadline, Weight: 1}}

// sendPastDeadline sends in's order under a key of its own with a deadline that
// has passed: a first request that reached the server only after its client gave
// up on it (its deadline ran out) and went on to place the order again, as place
// then does with the order's key. Applied, it would make a second order; idem
// refuses it (412). Its answer is not waited for by the client's logic: whatever
// it is, the client has moved on.
func (r *run) sendPastDeadline(client *http.Client, in *intent, newRequest func(string, time.Time) (*http.Request, error)) {
	key := timedKey(rand.New(rand.NewPCG(uint64(r.f.Seed), fnv64(in.key))), r.now().Truncate(time.Hour).Add(-time.Hour))
	req, err := newRequest(key, r.now().Add(-deadlineBudget))
	if err != nil {
		return
	}
	req.Header.Set(headerOrder, in.key)
	r.pastDeadline.Store(key, in.key)
	resp, err := client.Do(req)
	if err == nil {
		discard(resp)
	}
}

// fnv64 is the FNV-1a hash of s.
func fnv64(s string) uint64 {
	h := uint64(14695981039346656037)
	for i := range len(s) {
		h = (h ^ uint64(s[i])) * 1099511628211
	}
	return h
}

// discard reads a little of resp's body and closes it, so its connection is reused.
func discard(resp *http.Response) {
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
	resp.Body.Close()
}

// retryLate moves the clock past the retention window and retries a few accepted
// orders with their original keys: the server no longer remembers them.
func (r *run) retryLate(ctx context.Context, api orderAPI, intents []intent) error {
	n := max(1, len(intents)/1000)
	// No more faults: this phase shows the window's documented limit at the API. A
	// consumer restart now would make Kafka replay old messages from its last
	// committed offset, past their keys' retention too, and the run would count
	// them as applied again: the same limit, where the checker of the later
	// boundaries does not expect it.
	r.inj.Calm()
	// Past the window from every key, whatever the earlier jumps (±10 min) did.
	r.f.Clock.Jump(r.f.Retention + 15*time.Minute - r.f.Clock.Offset())
	client, err := api.client(false)
	if err != nil {
		return err
	}
	defer client.close()
	rng := rand.New(rand.NewPCG(uint64(r.f.Seed), 0x1a7e))
	for range n {
		in := intents[rng.IntN(len(intents))]
		if !in.accepted {
			continue
		}
		r.inj.Count(FaultLateRetry)
		client.place(ctx, &in)
	}
	return nil
}

// rngReader adapts a math/rand/v2 source to io.Reader for seeded UUIDs.
type rngReader struct{ r *rand.Rand }

func (r rngReader) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = byte(r.r.Uint32())
	}
	return len(p), nil
}
