package idemhttp

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemkey"
	"github.com/idemhq/idem/internal/metrics"
)

// refuse answers a request that must not run whatever the store holds for its key:
// its Idem-Deadline has passed, or its key is too old, dated in the future, or
// untimed where timed keys are required. It runs before the claim: a key past
// Config.MaxKeyAge has by definition no record to rely on (one that happens to
// remain would be replayed on one replica and missing on another), and a request
// past its deadline must not be acted on at all. refused is false when the request
// may go on.
func (c *mwCore) refuse(w http.ResponseWriter, r *http.Request, key string) (o metrics.HTTPOutcome, refused bool) {
	now := c.cfg.Now()
	if vs := r.Header[idem.HeaderDeadline]; len(vs) > 0 {
		if len(vs) > 1 {
			writeProblem(w, http.StatusBadRequest, ProblemInvalidDeadline, "Invalid Idem-Deadline",
				fmt.Sprintf("idem: %s is sent %d times: send it exactly once", idem.HeaderDeadline, len(vs)), 0)
			return metrics.HTTPRejected, true
		}
		deadline, err := idem.ParseDeadline(vs[0])
		if err != nil {
			writeProblem(w, http.StatusBadRequest, ProblemInvalidDeadline, "Invalid Idem-Deadline", err.Error(), 0)
			return metrics.HTTPRejected, true
		}
		if now.After(deadline) {
			return c.refused(w, metrics.RefusedDeadline, http.StatusPreconditionFailed, ProblemDeadlinePassed, "Deadline passed",
				fmt.Sprintf("idem: the request with Idempotency-Key %q arrived after its %s %s (the server's clock reads %s), so it was not run: the sender had given up by then; send it again with a later deadline if it is still wanted (sender and server clocks must agree within %v)",
					key, idem.HeaderDeadline, idem.FormatDeadline(deadline), idem.FormatDeadline(now), idemkey.MaxSkew))
		}
	}
	if c.cfg.MaxKeyAge < 0 {
		return 0, false
	}
	if _, timed := idemkey.TimeOf(key); !timed && !c.cfg.RequireTimedKeys {
		return 0, false // an untimed key cannot be judged: no error built on the hot path
	}
	err := idemkey.CheckFresh(key, c.cfg.MaxKeyAge, now)
	if se, ok := errors.AsType[*idemkey.StaleError](err); ok {
		return c.refused(w, metrics.RefusedStaleKey, http.StatusGone, ProblemKeyExpired, "Idempotency-Key expired",
			fmt.Sprintf("idem: Idempotency-Key %q was made at %s, %v ago, longer than the %v this server keeps keys, so the request was not run: its first attempt may have taken effect and been forgotten; do not retry it, check whether it took effect and send a new request with a new key only if it did not",
				key, idem.FormatDeadline(se.Time), se.Age.Round(time.Second), se.Window))
	}
	if fe, ok := errors.AsType[*idemkey.FutureError](err); ok {
		return c.refused(w, metrics.RefusedFutureKey, http.StatusBadRequest, ProblemKeyFromFuture, "Idempotency-Key from the future",
			fmt.Sprintf("idem: Idempotency-Key %q is dated %s, %v ahead of this server's clock, more than the %v allowed skew, so the request was not run: the client's clock is wrong; fix it (NTP) and send the request again",
				key, idem.FormatDeadline(fe.Time), fe.Ahead.Round(time.Second), idemkey.MaxSkew))
	}
	if err != nil && c.cfg.RequireTimedKeys {
		// An untimed key (UUIDv4, an intent hash, free text): it cannot be judged.
		return c.refused(w, metrics.RefusedUntimedKey, http.StatusBadRequest, ProblemUntimedKey, "Idempotency-Key carries no time",
			fmt.Sprintf("idem: Idempotency-Key %q is not a UUIDv7 or ULID, and this server requires keys that carry their time, so it can refuse a retry that comes after it forgot the key; send a UUIDv7 (idemkey.NewV7) or a ULID", key))
	}
	return 0, false
}

// refused answers a request refused before it ran, for why (counted in
// idem_http_refused_total), with the problem status, typ, title and detail.
func (c *mwCore) refused(w http.ResponseWriter, why metrics.HTTPRefusal, status int, typ, title, detail string) (metrics.HTTPOutcome, bool) {
	c.m.Refused(why)
	writeProblem(w, status, typ, title, detail, 0)
	return metrics.HTTPRejected, true
}
