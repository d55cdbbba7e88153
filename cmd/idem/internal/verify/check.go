package verify

import (
	"context"
	"fmt"
	"sort"
	"time"
)

// Boundary names, one Row each.
const (
	BoundaryHTTP   = "client → HTTP API"
	BoundaryOutbox = "order → outbox (one tx)"
	BoundaryRelay  = "outbox → broker (relay)"
	BoundaryInbox  = "broker → consumer (inbox)"
)

type applied struct {
	id     string
	amount int64
	at     int64 // unix ns on the flow's clock
}

// dupes splits the effects of one cause beyond the first into duplicated effects
// and late duplicates: those that happened a retention window or more after the
// first, when the key had been forgotten by design.
func dupes(es []applied, retention time.Duration) (dup, late int, lateAmount int64) {
	if len(es) < 2 {
		return 0, 0, 0
	}
	sort.Slice(es, func(i, j int) bool { return es[i].at < es[j].at })
	for _, e := range es[1:] {
		if time.Duration(e.at-es[0].at) >= retention {
			late++
			lateAmount += e.amount
		} else {
			dup++
		}
	}
	return dup, late, lateAmount
}

// check reads the databases back and builds the report.
func (r *run) check(ctx context.Context, intents []intent) (*Report, error) {
	db := r.f.DB
	rep := &Report{}
	query := func(what, q string, scan func(scan func(...any) error) error) error {
		rows, err := db.QueryContext(ctx, q)
		if err != nil {
			return fmt.Errorf("chaos: read %s: %w", what, err)
		}
		defer rows.Close()
		for rows.Next() {
			if err := scan(rows.Scan); err != nil {
				return fmt.Errorf("chaos: read %s: %w", what, err)
			}
		}
		return rows.Err()
	}

	// Orders, by request key and by id.
	byKey := map[string][]applied{}
	orders := map[string]int64{}
	var orderSum int64
	if err := query("orders", "SELECT id, request_key, amount, created_at FROM "+tableOrders, func(scan func(...any) error) error {
		var e applied
		var key string
		if err := scan(&e.id, &key, &e.amount, &e.at); err != nil {
			return err
		}
		byKey[key] = append(byKey[key], e)
		orders[e.id] = e.amount
		orderSum += e.amount
		return nil
	}); err != nil {
		return nil, err
	}
	httpRow := Row{Boundary: BoundaryHTTP, Attempts: r.received.Total(), EffectsApplied: len(orders)}
	httpRow.DuplicatesDelivered = r.received.Total() - r.received.Distinct()
	httpRow.DuplicatesSuppressed = max(0, r.received.Total()-int(r.executions.Load()))
	for _, in := range intents {
		if !in.accepted {
			rep.Unanswered++
		} else {
			rep.Accepted++
		}
		if in.accepted && len(byKey[in.key]) == 0 {
			httpRow.Lost++
		}
	}
	for _, es := range byKey {
		d, l, _ := dupes(es, r.f.Retention)
		httpRow.DuplicatedEffects += d
		httpRow.LateDuplicates += l
	}

	// The outbox: one message per order, written in the order's transaction.
	outboxRows := map[string]int{}
	published := map[string]bool{}
	if err := query("the outbox", "SELECT msg_id, published_at IS NOT NULL FROM idem_outbox", func(scan func(...any) error) error {
		var id string
		var pub bool
		if err := scan(&id, &pub); err != nil {
			return err
		}
		outboxRows[id]++
		published[id] = published[id] || pub
		return nil
	}); err != nil {
		return nil, err
	}
	obRow := Row{Boundary: BoundaryOutbox, Attempts: len(orders)}
	relayRow := Row{Boundary: BoundaryRelay, Attempts: r.published.Total()}
	relayRow.DuplicatesDelivered = r.published.Total() - r.published.Distinct()
	if stored, ok := r.f.Broker.Stored(ctx); ok {
		relayRow.DuplicatesSuppressed = min(relayRow.DuplicatesDelivered, max(0, relayRow.DuplicatesDelivered-(stored-r.published.Distinct())))
	}
	for id, n := range outboxRows {
		if _, ok := orders[id]; !ok {
			obRow.DuplicatedEffects += n // a message without its order: a torn transaction
			continue
		}
		obRow.EffectsApplied += n
		obRow.DuplicatedEffects += n - 1
		if published[id] {
			relayRow.EffectsApplied++
		} else {
			relayRow.Lost++
		}
	}
	for id := range orders {
		if outboxRows[id] == 0 {
			obRow.Lost++
		}
	}

	// The ledger: one entry per order, and the balance.
	byOrder := map[string][]applied{}
	var ledgerSum int64
	if err := query("the ledger", "SELECT order_id, amount, applied_at FROM "+tableLedger, func(scan func(...any) error) error {
		var e applied
		if err := scan(&e.id, &e.amount, &e.at); err != nil {
			return err
		}
		byOrder[e.id] = append(byOrder[e.id], e)
		ledgerSum += e.amount
		return nil
	}); err != nil {
		return nil, err
	}
	inRow := Row{Boundary: BoundaryInbox, Attempts: r.delivered.Total()}
	inRow.DuplicatesDelivered = r.delivered.Total() - r.delivered.Distinct()
	inRow.DuplicatesSuppressed = r.metric("idem_inbox_messages_total", "outcome", "duplicate")
	var lateSum int64
	for id, es := range byOrder {
		inRow.EffectsApplied += len(es)
		if _, ok := orders[id]; !ok {
			inRow.DuplicatedEffects += len(es) // an effect without an order
			continue
		}
		d, l, amt := dupes(es, r.f.Retention)
		inRow.DuplicatedEffects += d
		inRow.LateDuplicates += l
		lateSum += amt
	}
	for id := range orders {
		if len(byOrder[id]) == 0 {
			inRow.Lost++
		}
	}
	var total int64
	if err := db.QueryRowContext(ctx, "SELECT total FROM "+tableBalance+" WHERE id = 1").Scan(&total); err != nil {
		return nil, fmt.Errorf("chaos: read the balance: %w", err)
	}
	// The balance must equal the ledger (no torn write) and the sum of the orders,
	// each once (plus the documented late duplicates).
	ok := total == ledgerSum && total == orderSum+lateSum
	inRow.BalanceOK = &ok
	rep.Balance, rep.OrderSum = total, orderSum

	if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM idem_dead_letters WHERE replayed_at IS NULL").Scan(&rep.DeadLetters); err != nil {
		return nil, fmt.Errorf("chaos: read the dead letters: %w", err)
	}
	pushRow, err := r.push.check(ctx, inRow.EffectsApplied)
	if err != nil {
		return nil, fmt.Errorf("chaos: read the streams: %w", err)
	}
	rep.Rows = []Row{httpRow, obRow, relayRow, inRow, r.checkPayments(orders), pushRow}
	return rep, nil
}

// metric sums the counter name of the run's registry over series whose label
// has value.
func (r *run) metric(name, label, value string) int {
	mfs, err := r.reg.Gather()
	if err != nil {
		return 0
	}
	total := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == label && lp.GetValue() == value {
					total += m.GetCounter().GetValue()
				}
			}
		}
	}
	return int(total)
}
