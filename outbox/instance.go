package outbox

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemhq/idem/internal/sqltext"
)

// relayForgetAfter is how long a relay's row outlives its staleness (staleAfter):
// Status lists it, stale, until then, and Cleanup deletes it after. A relay that
// stops cleanly deletes its own row (deregister); this forgets the ones that died.
const relayForgetAfter = time.Hour

// beatInterval bounds how often a relay writes its row.
const beatInterval = time.Second

// instance is what a relay reports about itself in idem_outbox_relays.
type instance struct {
	id, host  string
	pid       int
	started   time.Time
	published atomic.Int64

	mu       sync.Mutex
	lastBeat time.Time
	lastErr  string // the last round's error
}

func newInstance(id string) *instance {
	host, _ := os.Hostname()
	host = sqltext.Fit(host, 255)
	if id == "" {
		id = defaultInstance(host)
	}
	return &instance{id: id, host: host, pid: os.Getpid(), started: time.Now()}
}

// defaultInstance is RelayConfig.Instance when empty: host-pid-random.
func defaultInstance(host string) string {
	var b [4]byte
	rand.Read(b[:])
	return fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b[:]))
}

// beat records a round (published messages, its error) and, at most once a
// second, writes the relay's row in a transaction of its own: never in a round's.
func (r *Relay[Tx]) beat(ctx context.Context, published int, roundErr error) {
	in := r.inst
	in.published.Add(int64(published))
	in.mu.Lock()
	defer in.mu.Unlock()
	in.lastErr = ""
	if roundErr != nil {
		in.lastErr = sqltext.Fit(roundErr.Error(), 4096)
	}
	now := r.o.now()
	if ctx.Err() != nil || (!in.lastBeat.IsZero() && now.Sub(in.lastBeat) < beatInterval) {
		return
	}
	in.lastBeat = now
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	err := r.o.db.InTx(ctx, func(tx Tx) error {
		_, err := r.o.db.Querier(tx).Exec(ctx, r.o.stmts.UpsertRelay, in.id, in.host, in.pid, in.started.UnixMilli(), now.UnixMilli(), r.cfg.PollInterval.Milliseconds(),
			in.published.Load(), in.lastErr)
		return err
	})
	switch {
	case err == nil:
		r.beats.OK(ctx, "instance", in.id)
	case ctx.Err() == nil && roundErr == nil: // a failed round's cause is logged already
		r.beats.Fail(ctx, err, "instance", in.id)
	}
}

// deregister deletes the relay's row, when Run ends: a relay stopped cleanly is no
// longer listed. It runs on a context of its own, as ctx has ended, bounded.
func (r *Relay[Tx]) deregister(ctx context.Context) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	err := r.o.db.InTx(ctx, func(tx Tx) error {
		_, err := r.o.db.Querier(tx).Exec(ctx, r.o.stmts.DeleteRelay, r.inst.id)
		return err
	})
	if err != nil {
		r.cfg.Logger.WarnContext(ctx, "outbox relay: could not remove the relay instance; it is listed as stale, then forgotten",
			"instance", r.inst.id, "err", err)
	}
}
