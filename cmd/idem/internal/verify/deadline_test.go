package verify

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/idemsqlite"
	"github.com/idemhq/idem/inbox"
	"github.com/idemhq/idem/outbox"
)

type ackOnly struct{}

func (ackOnly) Ack(context.Context) error                { return nil }
func (ackOnly) Nak(context.Context, time.Duration) error { return nil }

// keysFor returns a request key whose order's event the run writes past its
// deadline (lateEvent) and one it writes with none.
func keysFor(t *testing.T, r *run) (late, onTime string) {
	t.Helper()
	for i := 0; late == "" || onTime == ""; i++ {
		if i > 10000 {
			t.Fatal("no key drawn for the fault in 10,000")
		}
		k := fmt.Sprintf("key-%d", i)
		if r.lateEvent(k) {
			late = k
		} else {
			onTime = k
		}
	}
	return late, onTime
}

// An order whose event is written past its deadline (FaultMessagePastDeadline):
// with idem the real inbox refuses it, dead-letters it as "deadline", and the
// checker counts it refused, neither lost nor expected in the balance or the
// payments; without idem (IgnoreDeadlines) it is applied and counted late
// applied. One with no ledger entry and no dead letter is lost, not excused.
func TestCheckLedgerMessagePastDeadline(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name                   string
		unsafe, deliverLate    bool
		applied, refused, late int
		lost                   int
		payable                int
		ok                     bool
	}{
		{name: "idem refuses it", deliverLate: true, applied: 1, refused: 1, payable: 1, ok: true},
		{name: "unsafe applies it", unsafe: true, deliverLate: true, applied: 2, late: 1, payable: 2},
		{name: "never delivered is lost", applied: 1, lost: 1, payable: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db, err := sql.Open("sqlite", idemsqlite.DSN(filepath.Join(t.TempDir(), "v.db"), idemsqlite.Config{}))
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			txdb, err := idemsql.SQLDB(ctx, db)
			if err != nil {
				t.Fatal(err)
			}
			f := &Flow{DB: db, FaultRate: 0.3, Seed: 7, Unsafe: tc.unsafe, Retention: time.Hour}
			r := &run{f: f, txdb: txdb, reg: prometheus.NewRegistry(), store: noDedup{}}
			if err := r.createTables(ctx); err != nil {
				t.Fatal(err)
			}
			if r.ob, err = outbox.New(ctx, txdb, outbox.Config{}); err != nil {
				t.Fatal(err)
			}
			// The ledger of the flow, but for the push.
			apply := func(ctx context.Context, tx *sql.Tx, m idem.Message) error {
				var ev orderEvent
				if err := json.Unmarshal(m.Payload, &ev); err != nil {
					return err
				}
				q := txdb.Querier(tx)
				if _, err := q.Exec(ctx, "INSERT INTO "+tableLedger+" (order_id, amount, applied_at) VALUES ($1, $2, $3)", ev.OrderID, ev.Amount, time.Now().UnixNano()); err != nil {
					return err
				}
				_, err := q.Exec(ctx, "UPDATE "+tableBalance+" SET total = total + $1 WHERE id = 1", ev.Amount)
				return err
			}
			c, err := inbox.New(ctx, emptySource{}, txdb, r.store, apply, r.inboxConfig(nil))
			if err != nil {
				t.Fatal(err)
			}
			lateKey, onTimeKey := keysFor(t, r)
			var ds []idem.Delivery
			for i, key := range []string{onTimeKey, lateKey} {
				id := fmt.Sprintf("order-%d", i)
				amount := int64(10 * (i + 1))
				if _, err := db.ExecContext(ctx, "INSERT INTO "+tableOrders+" (id, request_key, customer, amount, created_at) VALUES (?, ?, 'c', ?, 0)", id, key, amount); err != nil {
					t.Fatal(err)
				}
				payload, _ := json.Marshal(orderEvent{OrderID: id, Customer: "c", Amount: amount})
				m := idem.Message{ID: id, Topic: "orders", Payload: payload}
				if r.lateEvent(key) {
					// As placeOrder writes it.
					m = outbox.WithDeadline(m, r.now().Add(-deadlineBudget))
				}
				if key == lateKey && !tc.deliverLate {
					continue
				}
				ds = append(ds, idem.Delivery{Message: m, Settler: ackOnly{}})
			}
			c.Process(ctx, ds)

			rep := &Report{}
			orders, _, err := r.checkOrders(ctx, nil, rep)
			if err != nil {
				t.Fatal(err)
			}
			if len(orders.lateEvent) != 1 || r.lateEvents != 1 {
				t.Fatalf("orders with a late event: %v (%d), want the one of key %s", orders.lateEvent, r.lateEvents, lateKey)
			}
			row, err := r.checkLedger(ctx, orders, rep)
			if err != nil {
				t.Fatal(err)
			}
			if row.EffectsApplied != tc.applied || row.Refused != tc.refused || row.LateDuplicates != tc.late || row.Lost != tc.lost ||
				row.DuplicatedEffects != 0 || row.OK() != tc.ok {
				t.Errorf("row %+v (OK %v): want %d applied, %d refused, %d late applied, %d lost, OK %v",
					row, row.OK(), tc.applied, tc.refused, tc.late, tc.lost, tc.ok)
			}
			if *row.BalanceOK != (tc.lost == 0) {
				t.Errorf("balance exact = %v (balance %d, orders sum %d)", *row.BalanceOK, rep.Balance, rep.OrderSum)
			}
			// The settle wait does not wait for a refused order to be applied.
			var unapplied int
			if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+tableOrders+" o WHERE NOT EXISTS (SELECT 1 FROM "+tableLedger+
				" l WHERE l.order_id = o.id)"+refusedForDeadline).Scan(&unapplied); err != nil || unapplied != tc.lost {
				t.Errorf("orders pending application: %d (%v), want %d", unapplied, err, tc.lost)
			}
			if n := len(orders.applicable()); n != tc.payable {
				t.Errorf("orders the payments must charge: %d, want %d", n, tc.payable)
			}
			if tc.refused > 0 {
				if rep.OrderSum != 10 || rep.Balance != 10 {
					t.Errorf("balance %d, orders sum %d: want 10, the refused order's 20 left out of both", rep.Balance, rep.OrderSum)
				}
			}
		})
	}
}
