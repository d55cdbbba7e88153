package admin

import (
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemhq/idem/internal/metrics"
)

// Why a request was refused before its route ran: the reason label of
// idem_admin_refused_total.
const (
	refusedNoToken     = "no_token"     // no Authorization: Bearer header (401)
	refusedBadToken    = "bad_token"    // a token that is not one of the server's (401)
	refusedNotLoopback = "not_loopback" // no token configured, and a non-loopback Host (403)
	refusedReadOnly    = "read_only"    // the read token on a change, or on ?full=1 (403)
	refusedCrossSite   = "cross_site"   // a browser's cross-site change (403)
)

// Bounds on the audit records of refused changes: at most RefusedLogBurst at once,
// then one per RefusedLogEvery. Each record written says how many were left out
// since the previous one; idem_admin_refused_total counts every refusal.
const (
	RefusedLogBurst = 10
	RefusedLogEvery = 10 * time.Second
)

// refuse is the problem of a request refused for reason.
func refuse(status int, typ, reason, detail string) *problem {
	p := newProblem(status, typ, detail)
	p.refusal = reason
	return p
}

// refusals counts the refused requests and rations the audit records of the
// refused changes: anyone who can reach the API can send refused requests, as
// fast as they like, and must not fill the log with them.
type refusals struct {
	total *prometheus.CounterVec // nil without Config.Registerer
	now   func() time.Time

	mu      sync.Mutex
	tokens  float64   // records that may be written now
	at      time.Time // when tokens was last refilled
	skipped int64     // refused changes not recorded since the last record
}

func newRefusals(reg prometheus.Registerer, now func() time.Time) (*refusals, error) {
	r := &refusals{now: now, tokens: RefusedLogBurst}
	if reg == nil {
		return r, nil
	}
	var err error
	r.total, err = metrics.Counters(reg, "idem_admin_refused_total",
		"Requests the admin API refused before their route ran, by reason: no_token, bad_token, not_loopback, read_only, cross_site.",
		"reason")
	return r, err
}

// count counts a refusal of reason.
func (r *refusals) count(reason string) {
	if r.total != nil {
		r.total.WithLabelValues(reason).Inc()
	}
}

// record reports whether the audit record of one more refused change may be
// written, and if so how many were left out before it.
func (r *refusals) record() (ok bool, skipped int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now()
	if elapsed := now.Sub(r.at); elapsed > 0 {
		r.tokens = min(RefusedLogBurst, r.tokens+float64(elapsed)/float64(RefusedLogEvery))
	}
	r.at = now
	if r.tokens < 1 {
		r.skipped++
		return false, 0
	}
	r.tokens--
	skipped, r.skipped = r.skipped, 0
	return true, skipped
}

// refusedRead is the problem of a read-token request for ?full=1.
func refusedRead(detail string) *problem {
	return refuse(http.StatusForbidden, ProblemForbidden, refusedReadOnly, detail)
}
