package verify

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/chaos"
	"github.com/idemhq/idem/effect"
	"github.com/idemhq/idem/idemhttp"
	"github.com/idemhq/idem/idemmem"
	"github.com/idemhq/idem/internal/wait"
)

// Faults of the consumer → payment API boundary.
const (
	// FaultPaymentResponseDropped: the payment service charged, and its response
	// is lost; the worker sees an error and retries.
	FaultPaymentResponseDropped = "payment_response_dropped"
	// FaultPaymentWorkerKilled: the worker dies after the charge and before it
	// records the effect COMPLETE; the effect is taken over after its lease.
	FaultPaymentWorkerKilled = "payment_worker_killed_after_call"
	// FaultPaymentWorkerPaused: the worker stalls after the charge for longer than
	// its lease; another worker takes the effect over, and the first one's late
	// COMPLETE is fenced.
	FaultPaymentWorkerPaused = "payment_worker_paused_past_lease"
)

// BoundaryPayment is the row of the external payment API.
const BoundaryPayment = "consumer → payment API (effect)"

// paymentLease is the fence's lease in the flow: short, so that crashed and
// paused workers are taken over within the run.
const paymentLease = time.Second

// paymentWorkers is how many payment workers the flow runs, each with its own
// effect fence (and, with Flow.Skew, its own clock).
const paymentWorkers = 2

// paymentService is the outside system: a payment API over real HTTP that
// charges once per Idempotency-Key (idem's middleware in front of it, on its own
// store) unless the flow is unsafe, and counts the charges it made per order.
type paymentService struct {
	srv      *http.Server
	url      string
	received chaos.Tally // requests, by order
	mu       sync.Mutex
	charges  map[string]int // order → charges made
}

func startPaymentService(unsafe bool) (*paymentService, error) {
	p := &paymentService{charges: map[string]int{}}
	charge := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		order := r.URL.Query().Get("order")
		p.mu.Lock()
		p.charges[order]++
		p.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_ = json.NewEncoder(w).Encode(map[string]string{"charge": "ch_" + order})
	})
	h := http.Handler(charge)
	if !unsafe {
		store, err := idemmem.New(idemmem.Config{})
		if err != nil {
			return nil, err
		}
		mw, err := idemhttp.Middleware(idemhttp.Config{Store: store, RequireKey: true})
		if err != nil {
			return nil, err
		}
		h = mw(charge)
	}
	mux := http.NewServeMux()
	mux.Handle("POST /charges", h)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p.url = "http://" + ln.Addr().String() + "/charges"
	p.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.received.Add(r.URL.Query().Get("order"))
		mux.ServeHTTP(w, r)
	}), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = p.srv.Serve(ln) }()
	return p, nil
}

// counts returns the charges made per order.
func (p *paymentService) counts() map[string]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return maps.Clone(p.charges)
}

// errCrash is the panic of a payment worker killed on purpose.
var errCrash = errors.New("payment worker killed")

// payments runs the payment workers until ctx ends, one per fence: each charges
// the orders the ledger applied and records them paid. With idem, every charge
// goes through its worker's effect.Fence (key = order id, step "charge"); unsafe
// (nil fences), the worker calls and then records, at least once.
func (r *run) payments(ctx context.Context, fences []*effect.Fence[*sql.Tx], svc *paymentService) {
	faults := []chaos.Fault{
		{Kind: FaultPaymentResponseDropped, Weight: 3},
		{Kind: FaultPaymentWorkerKilled, Weight: 1},
		{Kind: FaultPaymentWorkerPaused, Weight: 0.3, Max: 3},
	}
	client := &http.Client{Transport: &idemhttp.Transport{MaxAttempts: 1}, Timeout: 10 * time.Second}
	attempts := &chaos.Tally{}
	call := func(order string) effect.Call {
		return func(ctx context.Context, key string) ([]byte, error) {
			fault := r.inj.Roll("charge "+order, attempts.Add(order), faults)
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, svc.url+"?order="+order, strings.NewReader("{}"))
			if err != nil {
				return nil, err
			}
			if r.f.Unsafe {
				req.Header.Set(idemhttp.HeaderKey, order) // ignored: no middleware
			}
			resp, err := client.Do(req)
			if err != nil {
				return nil, err
			}
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err == nil && resp.StatusCode != http.StatusCreated {
				err = fmt.Errorf("payment service: %d %s", resp.StatusCode, body)
			}
			switch fault {
			case FaultPaymentResponseDropped:
				return nil, fmt.Errorf("%w: %s", chaos.ErrInjected, fault)
			case FaultPaymentWorkerKilled:
				panic(errCrash)
			case FaultPaymentWorkerPaused:
				// paymentLease, not r.payLease: with Flow.Skew the lease is 2×Skew,
				// and a stall that long (up to 3 of them) would triple a short run.
				// The fence renews the lease while the call runs, so the stall is
				// a stall either way.
				time.Sleep(paymentLease + 500*time.Millisecond)
			}
			return body, err
		}
	}
	var wg sync.WaitGroup
	for _, fence := range fences {
		wg.Go(func() {
			for ctx.Err() == nil {
				orders, err := r.unpaid(ctx)
				if err != nil || len(orders) == 0 {
					wait.Sleep(ctx, 50*time.Millisecond)
					continue
				}
				paid := 0
				for _, order := range orders {
					if ctx.Err() != nil {
						return
					}
					if r.pay(ctx, fence, order, call(order)) {
						paid++
					}
				}
				if paid == 0 {
					// Every order was another worker's (in progress there) or
					// failed: let them finish rather than poll again at once.
					wait.Sleep(ctx, 20*time.Millisecond)
				}
			}
		})
	}
	wg.Wait()
	// Write-behind records still waiting are written before the run is checked
	// (a process stopping on purpose calls Flush).
	flushCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	for _, fence := range fences {
		if fence == nil {
			continue
		}
		if err := fence.Flush(flushCtx); err != nil {
			r.log.Warn("verify: flush the payment records", "err", err)
		}
	}
}

// pay charges one order through the fence (or, unsafe, directly) and records it
// paid, and reports whether it did. A worker killed on purpose drops the order, as
// a dead process would.
func (r *run) pay(ctx context.Context, fence *effect.Fence[*sql.Tx], order string, call effect.Call) (paid bool) {
	defer func() {
		if v := recover(); v != nil && v != errCrash {
			panic(v)
		}
	}()
	var err error
	switch {
	case fence != nil && r.f.Pay != PayFence:
		// No lease: the other worker may charge the same order at once, and the
		// payment service answers the second call 409 while the first runs; an
		// error here, retried in a later round.
		_, err = fence.DoKeyed(ctx, order, "charge", call)
	case fence != nil:
		_, err = fence.Do(ctx, order, "charge", call)
		if errors.Is(err, idem.ErrLeaseLost) {
			return false // fenced: the worker that took over records it
		}
	default:
		_, err = call(ctx, order)
	}
	if err != nil {
		return false // in progress elsewhere, or failed: a later round retries
	}
	if err := r.markPaid(ctx, order); err != nil {
		r.log.Warn("verify: record paid", "order", order, "err", err)
		return false
	}
	return true
}

// unpaid returns up to 64 applied orders not yet recorded paid, in random order
// so that workers spread. It reads the queue the ledger fills (tableUnpaid), not
// every order: a scan of the whole run per poll cost the harness half of its CPU.
func (r *run) unpaid(ctx context.Context) ([]string, error) {
	rows, err := r.f.DB.QueryContext(ctx, "SELECT u.order_id FROM "+tableUnpaid+" u WHERE NOT EXISTS (SELECT 1 FROM "+tablePaid+
		" p WHERE p.order_id = u.order_id) ORDER BY "+r.txdb.Driver.Migrate().Random+" LIMIT 64")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		out = append(out, id)
	}
	return out, rows.Err()
}

// markPaid records order paid and takes it off the queue, in one transaction.
func (r *run) markPaid(ctx context.Context, order string) error {
	tx, err := r.f.DB.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback() //nolint:errcheck // after Commit, a no-op
	q := r.txdb.Querier(tx)
	if _, err := q.Exec(ctx, r.insertIgnore(tablePaid), order); err != nil {
		return err
	}
	if _, err := q.Exec(ctx, "DELETE FROM "+tableUnpaid+" WHERE order_id = $1", order); err != nil {
		return err
	}
	return tx.Commit()
}

// insertIgnore inserts $1 as the order_id of table unless it is there.
func (r *run) insertIgnore(table string) string {
	return r.txdb.Driver.Migrate().InsertIgnore(table, "order_id", "$1")
}

// checkPayments builds the payment row: one charge per order.
func (r *run) checkPayments(orders map[string]int64) Row {
	row := Row{Boundary: BoundaryPayment, Attempts: r.paysvc.received.Total()}
	row.DuplicatesDelivered = row.Attempts - r.paysvc.received.Distinct()
	charges := r.paysvc.counts()
	made := 0
	for id, n := range charges {
		made += n
		if _, ok := orders[id]; !ok {
			row.DuplicatedEffects += n // a charge for no order
			continue
		}
		row.DuplicatedEffects += n - 1
	}
	row.EffectsApplied = made
	row.DuplicatesSuppressed = max(0, row.Attempts-made)
	for id := range orders {
		if charges[id] == 0 {
			row.Lost++
		}
	}
	return row
}
