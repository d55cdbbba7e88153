package verify

import (
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/idemhq/idem/chaos"
)

// Faults that are not about one operation: clock jumps and connection cuts.

// onFault injects the faults that are not about one request.
func (r *run) onFault(kind string) {
	switch kind {
	case FaultClockJump:
		// ±(30 s to 3 min), the total kept within ±10 min: leases expire and come
		// back, and retention (hours) is never crossed by accident.
		d := time.Duration(30+rand.IntN(150)) * time.Second
		if off := r.f.Clock.Offset(); off > 7*time.Minute || (off > -7*time.Minute && rand.IntN(2) == 0) {
			d = -d
		}
		r.f.Clock.Jump(d)
	case FaultDBCut:
		r.cut(r.f.DBProxy, kind)
	case FaultBrokerCut:
		r.cut(r.f.Broker.Proxy(), kind)
	}
}

// cut cuts p's connections in the background, one cut of p at a time and at
// most one every quarter second, so that the flow makes progress between cuts; a cut
// that does not happen is taken back from the fault counts.
func (r *run) cut(p *chaos.Proxy, kind string) {
	v, _ := r.cutting.LoadOrStore(p, new(atomic.Bool))
	busy := v.(*atomic.Bool)
	if !busy.CompareAndSwap(false, true) {
		r.inj.Cancel(kind)
		return
	}
	go func() {
		defer busy.Store(false)
		if err := p.Cut(20 * time.Millisecond); err != nil {
			r.log.Warn("verify: proxy cut", "err", err)
		}
		time.Sleep(250 * time.Millisecond)
	}()
}
