package chaos

import (
	"context"
	"database/sql"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/idemhq/idem"
)

// Fault kinds injected by ConsumerFlow.
const (
	FaultDuplicate         = "duplicate_delivery"  // the broker delivers the message once more
	FaultCrashBeforeCommit = "crash_before_commit" // the consumer applied the effect and died before commit
	FaultLostAck           = "lost_ack"            // committed, but the ack never reached the broker
	FaultPaused            = "paused_consumer"     // the consumer stalls inside its transaction while duplicates race
)

var faultKinds = [...]string{FaultDuplicate, FaultCrashBeforeCommit, FaultLostAck, FaultPaused}

// maxAttempts bounds the deliveries of one message; past it the run fails rather than
// spinning (a real consumer would dead-letter the message).
const maxAttempts = 100

// ConsumerFlow is the broker → consumer boundary: messages delivered at least once
// (duplicated, redelivered after crashes and lost acks, concurrently) to workers that
// apply each message's effect to a ledger and a running balance. With Store set and
// Unsafe false, each effect commits with its key in one transaction (idem.TxStore).
type ConsumerFlow struct {
	DB    *sql.DB
	Store idem.TxStore[*sql.Tx]
	// Boundary labels the report row.
	Boundary string
	// Tables is the prefix of the two tables the flow creates (ledger and balance).
	Tables    string
	Ops       int     // messages (effects) to apply
	Workers   int     // concurrent consumers
	FaultRate float64 // probability that a delivery is hit by a fault
	Seed      int64
	// Unsafe turns idem off: the plain at-least-once consumer, for the negative control.
	Unsafe bool
}

type message struct {
	key    string
	amount int64
}

// Run executes the flow and checks the database. The error is for failures of the
// harness itself (the database is unusable); lost or doubled effects are in the Row.
func (f *ConsumerFlow) Run(ctx context.Context) (Row, map[string]int, error) {
	if f.Workers <= 0 {
		f.Workers = 8
	}
	if !f.Unsafe && f.Store == nil {
		return Row{}, nil, errors.New("chaos: ConsumerFlow.Store is nil; set it, or set Unsafe for the negative control")
	}
	if err := f.createTables(ctx); err != nil {
		return Row{}, nil, err
	}
	rng := rand.New(rand.NewPCG(uint64(f.Seed), 0x1de))
	msgs := make([]message, f.Ops)
	for i := range msgs {
		id, _ := uuid.NewRandomFromReader(rngReader{rng})
		msgs[i] = message{key: id.String(), amount: 1 + rng.Int64N(1000)}
	}

	q := newQueue()
	for i := range msgs {
		q.push(i)
	}
	c := &consumer{flow: f, msgs: msgs, q: q, faults: make(map[string]int), attempts: make([]atomic.Int32, len(msgs))}
	var wg sync.WaitGroup
	errc := make(chan error, f.Workers)
	for range f.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := c.work(ctx); err != nil {
				errc <- err
				q.close()
			}
		}()
	}
	wg.Wait()
	close(errc)
	if err := <-errc; err != nil {
		return Row{}, nil, err
	}
	row, err := f.check(ctx, msgs)
	row.Attempts = int(c.total.Load())
	row.DuplicatesDelivered = row.Attempts - f.Ops
	row.DuplicatesSuppressed = int(c.suppressed.Load())
	return row, c.faults, err
}

type consumer struct {
	flow       *ConsumerFlow
	msgs       []message
	q          *queue
	attempts   []atomic.Int32
	total      atomic.Int64
	suppressed atomic.Int64
	mu         sync.Mutex
	faults     map[string]int
}

func (c *consumer) work(ctx context.Context) error {
	for {
		i, ok := c.q.pop()
		if !ok {
			return nil
		}
		attempt := c.attempts[i].Add(1)
		if attempt > maxAttempts {
			return fmt.Errorf("chaos: message %s was delivered %d times without being applied", c.msgs[i].key, maxAttempts)
		}
		c.total.Add(1)
		fault := c.fault(i, attempt)
		if fault == FaultDuplicate {
			c.q.push(i)
		}
		redeliver, err := c.deliver(ctx, c.msgs[i], fault)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			redeliver = true // the consumer failed: the broker redelivers
		}
		if redeliver {
			c.q.push(i)
		}
		c.q.done()
	}
}

// fault decides, from the seed, which fault (if any) hits this delivery.
func (c *consumer) fault(i int, attempt int32) string {
	r := rand.New(rand.NewPCG(uint64(c.flow.Seed)^uint64(i)<<20, uint64(attempt)))
	if r.Float64() >= c.flow.FaultRate {
		return ""
	}
	kind := faultKinds[r.IntN(len(faultKinds))]
	c.mu.Lock()
	c.faults[kind]++
	c.mu.Unlock()
	return kind
}

// deliver processes one delivery and reports whether the broker will deliver it again.
func (c *consumer) deliver(ctx context.Context, m message, fault string) (redeliver bool, err error) {
	f := c.flow
	tx, err := f.DB.BeginTx(ctx, nil)
	if err != nil {
		return true, err
	}
	defer func() { _ = tx.Rollback() }() // no-op after commit

	var token uint64
	key := idem.Key{Scope: "verify-consumer", ID: m.key}
	if !f.Unsafe {
		res, err := f.Store.ClaimTx(ctx, tx, idem.Claim{Key: key, Fingerprint: amountFingerprint(m.amount)})
		if err != nil {
			return true, err
		}
		switch res.Outcome {
		case idem.Acquired:
			token = res.Token
		case idem.Replayed:
			c.suppressed.Add(1)
			return fault == FaultLostAck, nil // ack the duplicate (unless that ack is lost too)
		case idem.InProgress:
			return true, nil
		default:
			return false, fmt.Errorf("chaos: message %s: claim outcome %v", m.key, res.Outcome)
		}
	}
	if _, err := tx.ExecContext(ctx, "INSERT INTO "+f.Tables+"ledger (msg_key, amount) VALUES ($1, $2)", m.key, m.amount); err != nil {
		return true, err
	}
	if _, err := tx.ExecContext(ctx, "UPDATE "+f.Tables+"balance SET total = total + $1 WHERE id = 1", m.amount); err != nil {
		return true, err
	}
	if !f.Unsafe {
		if err := f.Store.CompleteTx(ctx, tx, key, token, nil); err != nil {
			return true, err
		}
	}
	switch fault {
	case FaultCrashBeforeCommit:
		return true, nil // deferred rollback: the crash takes the effect and the key with it
	case FaultPaused:
		time.Sleep(2 * time.Millisecond)
	}
	if err := tx.Commit(); err != nil {
		return true, err
	}
	return fault == FaultLostAck, nil
}

func amountFingerprint(amount int64) []byte {
	return binary.BigEndian.AppendUint64(nil, uint64(amount))
}

func (f *ConsumerFlow) createTables(ctx context.Context) error {
	for _, stmt := range []string{
		"CREATE TABLE " + f.Tables + "ledger (msg_key TEXT NOT NULL, amount BIGINT NOT NULL)",
		"CREATE TABLE " + f.Tables + "balance (id INTEGER PRIMARY KEY, total BIGINT NOT NULL)",
		"INSERT INTO " + f.Tables + "balance (id, total) VALUES (1, 0)",
	} {
		if _, err := f.DB.ExecContext(ctx, stmt); err != nil {
			return fmt.Errorf("chaos: set up the ledger: %w", err)
		}
	}
	return nil
}

// check reads the ledger back: every message applied exactly once, the balance exact.
func (f *ConsumerFlow) check(ctx context.Context, msgs []message) (Row, error) {
	row := Row{Boundary: f.Boundary}
	counts := make(map[string]int, len(msgs))
	rows, err := f.DB.QueryContext(ctx, "SELECT msg_key, COUNT(*) FROM "+f.Tables+"ledger GROUP BY msg_key")
	if err != nil {
		return row, fmt.Errorf("chaos: read the ledger: %w", err)
	}
	for rows.Next() {
		var k string
		var n int
		if err := rows.Scan(&k, &n); err != nil {
			rows.Close()
			return row, err
		}
		counts[k] = n
		row.EffectsApplied += n
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return row, err
	}
	var want, total int64
	for _, m := range msgs {
		want += m.amount
		switch n := counts[m.key]; {
		case n == 0:
			row.Lost++
		case n > 1:
			row.DuplicatedEffects += n - 1
		}
	}
	if err := f.DB.QueryRowContext(ctx, "SELECT total FROM "+f.Tables+"balance WHERE id = 1").Scan(&total); err != nil {
		return row, fmt.Errorf("chaos: read the balance: %w", err)
	}
	var applied int64
	for _, m := range msgs {
		applied += m.amount * int64(counts[m.key])
	}
	// The balance must equal what the ledger says was applied, and that must equal the
	// sum of the messages: the first catches a torn write, the second a lost or
	// doubled effect.
	row.BalanceOK = total == applied && total == want
	return row, nil
}

// rngReader adapts a math/rand/v2 source to io.Reader for seeded UUIDs.
type rngReader struct{ r *rand.Rand }

func (r rngReader) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = byte(r.r.Uint32())
	}
	return len(p), nil
}
