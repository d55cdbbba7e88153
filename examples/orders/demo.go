package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"text/tabwriter"
	"time"

	"github.com/idemhq/idem/idemhttp"
)

// demoOrders are the orders the demo places; the first is sent twice with the
// same key, as a client does when the response to its first attempt is lost.
var demoOrders = []struct {
	key string
	req orderRequest
}{
	{"demo-order-1", orderRequest{Customer: "ada", Amount: 1200}},
	{"demo-order-2", orderRequest{Customer: "grace", Amount: 800}},
	{"demo-order-3", orderRequest{Customer: "linus", Amount: 450}},
}

// Report is what happened to each order of the demo.
type Report struct {
	Orders []OrderReport
	// Stored is the number of orders in the database: one per key.
	Stored int
}

// OrderReport counts what happened to one order at each boundary.
type OrderReport struct {
	Key, ID       string
	Posts         int // POST /orders sent with the key
	SameID        bool
	Deliveries    int // deliveries of its event to the consumer
	LedgerEntries int
	Attempts      int // charges the payment worker tried (fence.Do calls)
	PaymentCalls  int // requests that reached the payment API
	Charges       int // charges the payment API made
}

// Demo places the demo's orders on app (app.Run must be running), waits until
// each is charged and the faults' duplicates have been delivered, and writes what
// happened to out.
func Demo(ctx context.Context, app *App, out io.Writer) (*Report, error) {
	fmt.Fprintf(out, "orders demo: API %s, database %s, NATS %s\n\n", app.URL(), app.DBName(), app.NATSName())
	client := &http.Client{Timeout: 30 * time.Second}
	rep := &Report{}
	for i, o := range demoOrders {
		id, replayed, err := postOrder(ctx, client, app.URL(), o.key, o.req)
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(out, "POST /orders  Idempotency-Key: %s  → order %s\n", o.key, id)
		or := OrderReport{Key: o.key, ID: id, Posts: 1, SameID: !replayed}
		if i == 0 {
			// The client retries: its first response was lost, say.
			again, replayed, err := postOrder(ctx, client, app.URL(), o.key, o.req)
			if err != nil {
				return nil, err
			}
			or.Posts++
			or.SameID = again == id && replayed
			fmt.Fprintf(out, "POST /orders  Idempotency-Key: %s  → order %s (%s: %t, the retry)\n", o.key, again, idemhttp.HeaderReplayed, replayed)
		}
		rep.Orders = append(rep.Orders, or)
	}
	fmt.Fprintf(out, "\nwaiting for the relay, the consumer and the payment worker...\n")
	if err := waitCharged(ctx, app, rep); err != nil {
		return nil, err
	}
	if err := app.count(ctx, rep); err != nil {
		return nil, err
	}
	rep.print(out, app)
	return rep, nil
}

// postOrder places one order and returns its id and whether the response was a
// replay of a stored one.
func postOrder(ctx context.Context, client *http.Client, base, key string, in orderRequest) (id string, replayed bool, err error) {
	body, _ := json.Marshal(in)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/orders", bytes.NewReader(body))
	if err != nil {
		return "", false, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(idemhttp.HeaderKey, key)
	resp, err := client.Do(req)
	if err != nil {
		return "", false, fmt.Errorf("POST /orders: %w", err)
	}
	defer resp.Body.Close()
	var o order
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<16)).Decode(&o); err != nil || resp.StatusCode != http.StatusCreated {
		return "", false, fmt.Errorf("POST /orders: %s (%v)", resp.Status, err)
	}
	return o.ID, resp.Header.Get(idemhttp.HeaderReplayed) == "true", nil
}

// waitCharged waits until every order is charged and the message whose ack was
// lost has been delivered again and acknowledged.
func waitCharged(ctx context.Context, app *App, rep *Report) error {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		done, err := app.allCharged(ctx, rep)
		if err != nil {
			return err
		}
		if done {
			lostAck, _, _ := app.faults.lost()
			_, acks, _ := app.faults.counts(lostAck)
			if !app.faults.on || acks > 0 {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the orders were not all charged in time (raise --timeout, or run with -v to see why): %w", ctx.Err())
		case <-tick.C:
		}
	}
}

func (a *App) allCharged(ctx context.Context, rep *Report) (bool, error) {
	for _, o := range rep.Orders {
		var charged bool
		err := a.db.QueryRowContext(ctx, "SELECT COUNT(*) > 0 FROM payments WHERE order_id = $1 AND charge IS NOT NULL", o.ID).Scan(&charged)
		if err != nil || !charged {
			return false, err
		}
	}
	return true, nil
}

// count fills rep from the database, the payment API and the consumer's faults.
func (a *App) count(ctx context.Context, rep *Report) error {
	if err := a.db.QueryRowContext(ctx, "SELECT COUNT(*) FROM orders").Scan(&rep.Stored); err != nil {
		return err
	}
	for i := range rep.Orders {
		o := &rep.Orders[i]
		if err := a.db.QueryRowContext(ctx, "SELECT COUNT(*) FROM ledger WHERE order_id = $1", o.ID).Scan(&o.LedgerEntries); err != nil {
			return err
		}
		o.PaymentCalls, o.Charges = a.payments.counts(o.ID)
		o.Deliveries, _, o.Attempts = a.faults.counts(o.ID)
	}
	return nil
}

func (r *Report) print(out io.Writer, app *App) {
	ackLost, responseLost, recordLost := app.faults.lost()
	if app.faults.on {
		fmt.Fprintf(out, "\ninjected: the consumer's ack of order %s was lost: JetStream delivered it again, the inbox acked it unapplied;\n", ackLost)
		fmt.Fprintf(out, "          the payment API's response for order %s was lost: the client retried with the same key;\n", responseLost)
		fmt.Fprintf(out, "          the worker's record of the charge of order %s was lost: the fence returned the stored charge\n", recordLost)
	}
	fmt.Fprintln(out)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "key\torder\tPOSTs\tdeliveries\tledger entries\tcharge attempts\tpayment calls\tcharges")
	for _, o := range r.Orders {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\n", o.Key, o.ID, o.Posts, o.Deliveries, o.LedgerEntries, o.Attempts, o.PaymentCalls, o.Charges)
	}
	tw.Flush()
	if err := r.Check(); err != nil {
		fmt.Fprintf(out, "\nFAILED: %v\n", err)
		return
	}
	fmt.Fprintf(out, "\n%d orders stored for %d keys; every order applied once and charged once.\n", r.Stored, len(r.Orders))
}

// Check returns an error unless every order was stored, applied and charged
// exactly once.
func (r *Report) Check() error {
	var errs []error
	if r.Stored != len(r.Orders) {
		errs = append(errs, fmt.Errorf("%d orders stored for %d keys", r.Stored, len(r.Orders)))
	}
	for _, o := range r.Orders {
		if !o.SameID {
			errs = append(errs, fmt.Errorf("order %s: a retried POST did not return the stored order", o.Key))
		}
		if o.LedgerEntries != 1 {
			errs = append(errs, fmt.Errorf("order %s: %d ledger entries, want 1", o.ID, o.LedgerEntries))
		}
		if o.Charges != 1 {
			errs = append(errs, fmt.Errorf("order %s: charged %d times, want 1", o.ID, o.Charges))
		}
	}
	return errors.Join(errs...)
}
