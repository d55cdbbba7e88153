package verify

import (
	"context"
	"fmt"
	"sort"
	"time"
)

// Boundary names, one Row each.
const (
	BoundaryHTTP = "client → HTTP API"
	// BoundaryGRPC replaces BoundaryHTTP when the orders go over gRPC (--api grpc).
	BoundaryGRPC   = "client → gRPC API"
	BoundaryOutbox = "order → outbox (one tx)"
	BoundaryRelay  = "outbox → broker (relay)"
	// BoundaryRelayCDC replaces BoundaryRelay when the relay reads the WAL (--relay cdc).
	BoundaryRelayCDC = "outbox → broker (cdc)"
	BoundaryInbox    = "broker → consumer (inbox)"
)

type applied struct {
	id     string
	amount int64
	at     int64 // unix ns on the flow's clock
}

// dupes splits the effects of one cause beyond the first into duplicated effects
// and late duplicates: those that happened a retention window or more after the
// first, when the key had been forgotten (idem refuses such a retry by its key's
// age; without idem it is applied).
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

// check reads the databases back and builds the report: one row per boundary.
func (r *run) check(ctx context.Context, intents []intent) (*Report, error) {
	rep := &Report{AcksFailed: int(r.acksFailed.Load()), RelayCopies: r.sent.Total() - r.sent.Distinct(), StoredCopies: -1}
	if r.firsts.Distinct() > 0 {
		rep.StoredCopies = r.firsts.Total() - r.firsts.Distinct()
	}
	orders, httpRow, err := r.checkOrders(ctx, intents, rep)
	if err != nil {
		return nil, err
	}
	var middle []Row // order → outbox, outbox → broker; or order → queue
	if r.queue != nil {
		qRow, st, err := r.checkQueue(ctx, orders)
		if err != nil {
			return nil, err
		}
		middle, rep.Queue = []Row{qRow}, st
	} else {
		obRow, relayRow, err := r.checkOutbox(ctx, orders)
		if err != nil {
			return nil, err
		}
		middle = []Row{obRow, relayRow}
	}
	inRow, err := r.checkLedger(ctx, orders, rep)
	if err != nil {
		return nil, err
	}
	if err := r.f.DB.QueryRowContext(ctx, "SELECT COUNT(*) FROM idem_dead_letters WHERE replayed_at IS NULL").Scan(&rep.DeadLetters); err != nil {
		return nil, fmt.Errorf("read the dead letters: %w", err)
	}
	pushRow, err := r.push.check(ctx, inRow.EffectsApplied)
	if err != nil {
		return nil, fmt.Errorf("read the streams: %w", err)
	}
	rep.Rows = append(append([]Row{httpRow}, middle...), inRow, r.checkPayments(orders.applicable()), pushRow)
	return rep, nil
}

// orderSet is the orders the service wrote: amounts by order id, and their sum.
type orderSet struct {
	amount map[string]int64
	sum    int64
	// lateEvent holds the orders whose event was written with a passed deadline
	// (FaultMessagePastDeadline); refused those of them the inbox refused for it,
	// which have no effect past the broker by design (checkLedger fills it).
	lateEvent map[string]bool
	refused   map[string]bool
}

// applicable is the orders whose event was not refused for its deadline: those
// each later step must apply once.
func (o orderSet) applicable() map[string]int64 {
	if len(o.refused) == 0 {
		return o.amount
	}
	out := make(map[string]int64, len(o.amount))
	for id, amt := range o.amount {
		if !o.refused[id] {
			out[id] = amt
		}
	}
	return out
}

// query runs q and calls scan for each row; what names the table in errors.
func (r *run) query(ctx context.Context, what, q string, scan func(scan func(...any) error) error) error {
	rows, err := r.f.DB.QueryContext(ctx, q)
	if err != nil {
		return fmt.Errorf("read %s: %w", what, err)
	}
	defer rows.Close()
	for rows.Next() {
		if err := scan(rows.Scan); err != nil {
			return fmt.Errorf("read %s: %w", what, err)
		}
	}
	return rows.Err()
}

// checkOrders reads the orders, by request key and by id, and builds the API's row:
// one order per accepted request key. It counts the accepted and unanswered
// requests into rep.
func (r *run) checkOrders(ctx context.Context, intents []intent, rep *Report) (orderSet, Row, error) {
	byKey := map[string][]applied{}
	orders := orderSet{amount: map[string]int64{}, lateEvent: map[string]bool{}, refused: map[string]bool{}}
	if err := r.query(ctx, "orders", "SELECT id, request_key, amount, created_at FROM "+tableOrders, func(scan func(...any) error) error {
		var e applied
		var key string
		if err := scan(&e.id, &key, &e.amount, &e.at); err != nil {
			return err
		}
		byKey[key] = append(byKey[key], e)
		orders.amount[e.id] = e.amount
		if r.lateEvent(key) {
			orders.lateEvent[e.id] = true
		}
		orders.sum += e.amount
		return nil
	}); err != nil {
		return orders, Row{}, err
	}
	r.lateEvents = len(orders.lateEvent)
	row := Row{Boundary: BoundaryHTTP, Attempts: r.received.Total(), EffectsApplied: len(orders.amount)}
	refused := "idem_http_refused_total"
	if r.f.API == APIGRPC {
		row.Boundary, refused = BoundaryGRPC, "idem_grpc_refused_total"
	}
	row.DuplicatesDelivered = r.received.Total() - r.received.Distinct()
	row.Refused = r.metric(refused, "reason", "stale_key") + r.metric(refused, "reason", "deadline")
	row.DuplicatesSuppressed = max(0, r.received.Total()-int(r.executions.Load())-row.Refused)
	// Orders made by requests sent past their deadline: each is a second order of
	// an order placed again under its own key.
	r.pastDeadline.Range(func(k, _ any) bool {
		row.LateDuplicates += len(byKey[k.(string)])
		delete(byKey, k.(string))
		return true
	})
	for _, in := range intents {
		if !in.accepted {
			rep.Unanswered++
		} else {
			rep.Accepted++
		}
		if in.accepted && len(byKey[in.key]) == 0 {
			row.Lost++
		}
	}
	for _, es := range byKey {
		d, l, _ := dupes(es, r.f.Retention)
		row.DuplicatedEffects += d
		row.LateDuplicates += l
	}
	return orders, row, nil
}

// checkOutbox builds the outbox row (one message per order, written in the
// order's transaction) and the relay row (every message published).
func (r *run) checkOutbox(ctx context.Context, orders orderSet) (obRow, relayRow Row, err error) {
	outboxRows := map[string]int{}
	published := map[string]bool{}
	// A repair's copy (the audit's, under the message's id) is a publish of its
	// message, not a second message of its order.
	if err := r.query(ctx, "the outbox", "SELECT o.msg_id, o.published_at IS NOT NULL, r.copy_id IS NOT NULL FROM idem_outbox o "+
		"LEFT JOIN idem_outbox_repairs r ON r.copy_id = o.id", func(scan func(...any) error) error {
		var id string
		var pub, repair bool
		if err := scan(&id, &pub, &repair); err != nil {
			return err
		}
		if !repair {
			outboxRows[id]++
		}
		published[id] = published[id] || pub
		return nil
	}); err != nil {
		return obRow, relayRow, err
	}
	obRow = Row{Boundary: BoundaryOutbox, Attempts: len(orders.amount)}
	relayRow = Row{Boundary: BoundaryRelay, Attempts: r.published.Total()}
	relayRow.DuplicatesDelivered = r.published.Total() - r.published.Distinct()
	if stored, ok := r.f.Broker.Stored(ctx); ok {
		// The broker keeps stored-distinct copies; what it lost (FaultBrokerLoss)
		// it neither kept nor suppressed.
		lost := 0
		if r.losses != nil {
			lost = r.losses.dropped()
		}
		relayRow.DuplicatesSuppressed = min(relayRow.DuplicatesDelivered, max(0, relayRow.DuplicatesDelivered-(stored-r.published.Distinct())-lost))
	}
	if r.f.CDC != nil {
		// Published means the broker acknowledged it: the CDC relay marks its rows
		// after that, and a relay killed in between leaves them unmarked until the
		// next one publishes them again.
		relayRow.Boundary = BoundaryRelayCDC
		for id := range outboxRows {
			published[id] = r.stored.has(id)
		}
	}
	for id, n := range outboxRows {
		if _, ok := orders.amount[id]; !ok {
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
	for id := range orders.amount {
		if outboxRows[id] == 0 {
			obRow.Lost++
		}
	}
	return obRow, relayRow, nil
}

// checkLedger builds the inbox row: one ledger entry per order, and a balance
// equal to the ledger and to the orders. An order whose event was written past
// its deadline must have none: the inbox refuses it and dead-letters it as
// "deadline" (such orders go into orders.refused, out of the later steps'
// accounts); one applied is a late applied effect. It records the balance into rep.
func (r *run) checkLedger(ctx context.Context, orders orderSet, rep *Report) (Row, error) {
	byOrder := map[string][]applied{}
	var ledgerSum int64
	if err := r.query(ctx, "the ledger", "SELECT order_id, amount, applied_at FROM "+tableLedger, func(scan func(...any) error) error {
		var e applied
		if err := scan(&e.id, &e.amount, &e.at); err != nil {
			return err
		}
		byOrder[e.id] = append(byOrder[e.id], e)
		ledgerSum += e.amount
		return nil
	}); err != nil {
		return Row{}, err
	}
	deadlineLetters := map[string]bool{}
	if err := r.query(ctx, "the dead letters", "SELECT msg_id FROM idem_dead_letters WHERE replayed_at IS NULL AND kind = 'deadline'", func(scan func(...any) error) error {
		var id string
		if err := scan(&id); err != nil {
			return err
		}
		deadlineLetters[id] = true
		return nil
	}); err != nil {
		return Row{}, err
	}
	row := Row{Boundary: BoundaryInbox, Attempts: r.delivered.Total()}
	if r.queue != nil {
		row.Boundary = BoundaryQueueConsumer
	}
	row.DuplicatesDelivered = r.delivered.Total() - r.delivered.Distinct()
	row.DuplicatesSuppressed = r.metric("idem_inbox_messages_total", "outcome", "duplicate")
	row.Refused = r.metric("idem_inbox_refused_total", "reason", "deadline")
	// want less refusedSum is the balance the ledger must show: each order once,
	// but for the orders whose event was refused, plus the documented late duplicates.
	want, refusedSum := orders.sum, int64(0)
	for id, es := range byOrder {
		row.EffectsApplied += len(es)
		if _, ok := orders.amount[id]; !ok {
			row.DuplicatedEffects += len(es) // an effect without an order
			continue
		}
		d, l, amt := dupes(es, r.f.Retention)
		row.DuplicatedEffects += d
		row.LateDuplicates += l
		want += amt
		if orders.lateEvent[id] {
			// Applied past its deadline: the first effect too is a late one. Its
			// amount is in orders.sum already.
			row.LateDuplicates++
		}
	}
	for id, amt := range orders.amount {
		if len(byOrder[id]) > 0 {
			continue
		}
		if orders.lateEvent[id] && deadlineLetters[id] {
			orders.refused[id] = true
			refusedSum += amt
			continue
		}
		row.Lost++
	}
	var total int64
	if err := r.f.DB.QueryRowContext(ctx, "SELECT total FROM "+tableBalance+" WHERE id = 1").Scan(&total); err != nil {
		return row, fmt.Errorf("read the balance: %w", err)
	}
	// The balance must equal the ledger (no torn write) and the sum of the orders,
	// each once (plus the documented late duplicates).
	ok := total == ledgerSum && total == want-refusedSum
	row.BalanceOK = &ok
	// The orders' sum is of those whose event was not refused.
	rep.Balance, rep.OrderSum = total, orders.sum-refusedSum
	return row, nil
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
