package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/idemhq/idem/effect"
	"github.com/idemhq/idem/idemhttp"
	"github.com/idemhq/idem/idemmem"
)

// paymentAPI stands in for a payment provider (Stripe, Adyen): POST /charges
// charges an order, once per Idempotency-Key, as those providers do; here, with
// idemhttp's middleware on a memory store. It counts the requests and the
// charges it made per order, for the demo's report.
type paymentAPI struct {
	url string
	srv *http.Server

	mu       sync.Mutex
	requests map[string]int // order → requests received
	charges  map[string]int // order → charges made
}

type chargeRequest struct {
	OrderID string `json:"order_id"`
	Amount  int64  `json:"amount"`
}

type chargeResponse struct {
	Charge string `json:"charge"`
}

func startPaymentAPI() (*paymentAPI, error) {
	p := &paymentAPI{requests: map[string]int{}, charges: map[string]int{}}
	store, err := idemmem.New(idemmem.Config{})
	if err != nil {
		return nil, err
	}
	mw, err := idemhttp.Middleware(idemhttp.Config{Store: store, RequireKey: true})
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("POST /charges", p.countRequests(mw(http.HandlerFunc(p.charge))))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p.url = "http://" + ln.Addr().String()
	p.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = p.srv.Serve(ln) }()
	return p, nil
}

func (p *paymentAPI) charge(w http.ResponseWriter, r *http.Request) {
	var in chargeRequest
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<16)).Decode(&in); err != nil || in.OrderID == "" {
		http.Error(w, `body: want {"order_id", "amount"}`, http.StatusBadRequest)
		return
	}
	p.mu.Lock()
	p.charges[in.OrderID]++
	n := p.charges[in.OrderID]
	p.mu.Unlock()
	writeJSON(w, http.StatusCreated, chargeResponse{Charge: fmt.Sprintf("ch_%s_%d", in.OrderID, n)})
}

// countRequests counts every request per order, duplicates included.
func (p *paymentAPI) countRequests(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 1<<16))
		if err != nil {
			http.Error(w, "body too large", http.StatusRequestEntityTooLarge)
			return
		}
		var in chargeRequest
		_ = json.Unmarshal(body, &in)
		p.mu.Lock()
		p.requests[in.OrderID]++
		p.mu.Unlock()
		r.Body = io.NopCloser(bytes.NewReader(body))
		next.ServeHTTP(w, r)
	})
}

// counts returns the requests received and the charges made for order.
func (p *paymentAPI) counts(order string) (requests, charges int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.requests[order], p.charges[order]
}

func (p *paymentAPI) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = p.srv.Shutdown(ctx)
}

// payOrders is the payment worker: until ctx ends, it charges the applied orders
// not charged yet, each through the fence.
func (a *App) payOrders(ctx context.Context) error {
	client := &http.Client{Timeout: 30 * time.Second, Transport: &idemhttp.Transport{
		// The same Idempotency-Key on every attempt: a charge whose response is
		// lost is retried, and the provider answers with the stored charge.
		Base:        a.faults.transport(http.DefaultTransport),
		MaxAttempts: 5, MinBackoff: 50 * time.Millisecond, MaxBackoff: time.Second,
		Logger: a.cfg.Logger,
	}}
	defer client.CloseIdleConnections()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		if err := a.payDue(ctx, client); err != nil && ctx.Err() == nil {
			a.cfg.Logger.Warn("payments: a round failed; the next one retries", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

type due struct {
	order  string
	amount int64
}

// payDue charges the orders due, up to 32 a round.
func (a *App) payDue(ctx context.Context, client *http.Client) error {
	rows, err := a.db.QueryContext(ctx, "SELECT order_id, amount FROM payments WHERE charge IS NULL AND failed IS NULL ORDER BY order_id LIMIT 32")
	if err != nil {
		return err
	}
	var todo []due
	for rows.Next() {
		var d due
		if err := rows.Scan(&d.order, &d.amount); err != nil {
			rows.Close()
			return err
		}
		todo = append(todo, d)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	var errs []error
	for _, d := range todo {
		errs = append(errs, a.pay(ctx, client, d))
	}
	return errors.Join(errs...)
}

// pay charges one order through the fence, keyed by the order and the step
// "charge". The fence calls at most once per key while a call is in flight or
// complete; a worker that dies mid-call leaves the effect pending, and the next Do
// after its lease calls again with the same derived key, which the provider
// deduplicates. The result is recorded on the order afterwards; if that write
// fails, the next round's Do returns the stored result without calling.
func (a *App) pay(ctx context.Context, client *http.Client, d due) error {
	a.faults.attempt(d.order)
	result, err := a.fence.Do(ctx, d.order, "charge", func(ctx context.Context, key string) ([]byte, error) {
		body, _ := json.Marshal(chargeRequest{OrderID: d.order, Amount: d.amount})
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, a.payments.url+"/charges", strings.NewReader(string(body)))
		if err != nil {
			return nil, err
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set(idemhttp.HeaderKey, key) // idemkey.Derive(order, "charge")
		resp, err := client.Do(req)
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		out, err := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
		if err != nil {
			return nil, err
		}
		switch {
		case resp.StatusCode == http.StatusCreated:
			return out, nil
		case resp.StatusCode >= 500 || resp.StatusCode == http.StatusConflict || resp.StatusCode == http.StatusTooManyRequests:
			return nil, fmt.Errorf("payment API: %s", resp.Status) // the fence releases it: a later round retries
		default:
			// Refused (a declined card, a bad request): retrying will not help.
			return nil, effect.Permanent(fmt.Errorf("payment API: %s: %s", resp.Status, bytes.TrimSpace(out)))
		}
	})
	if errors.Is(err, effect.ErrInProgress) {
		return nil // another worker holds it
	}
	if failed := (*effect.FailedError)(nil); errors.As(err, &failed) {
		// Refused for good: recorded, so that the order is not tried again.
		_, err = a.db.ExecContext(ctx, "UPDATE payments SET failed = $1 WHERE order_id = $2", failed.Reason, d.order)
		return err
	}
	if err != nil {
		return fmt.Errorf("charge order %s: %w", d.order, err)
	}
	var c chargeResponse
	if err := json.Unmarshal(result, &c); err != nil || c.Charge == "" {
		return fmt.Errorf("charge order %s: the payment API answered %q", d.order, result)
	}
	if a.faults.loseRecord(d.order) {
		return fmt.Errorf("charge order %s: %w", d.order, errRecordLost)
	}
	_, err = a.db.ExecContext(ctx, "UPDATE payments SET charge = $1 WHERE order_id = $2", c.Charge, d.order)
	return err
}
