package gateway

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/idemhq/idem"
)

// HealthKey is claimed by /healthz (StoreHealth). Its scope cannot be produced by
// a request: the middleware's scopes are "anonymous", "cred:…", "auth:…" and
// "tenant:…".
var HealthKey = idem.Key{Scope: "idem-serve:health", ID: "healthz"}

// StoreHealth answers /healthz by claiming and releasing HealthKey: the path every
// request takes (for SQLite, the writer and an fsync), so a full disk or a dead
// connection shows. A concurrent probe finds the key in progress, which is an answer
// too; a crashed probe's claim expires with its 5 s lease.
//
// An unhealthy answer names what failed in idem's words (reason), as the relay's
// does: whoever reaches /healthz must not read the driver's text, which names the
// database user, the database and its addresses. The error itself goes to log
// (idem serve's redacts it) when it starts or changes, and the recovery when the store answers again.
func StoreHealth(store idem.Store, log *slog.Logger, reason func(error) string) func(context.Context) (bool, string) {
	var (
		mu   sync.Mutex
		last string // the text of the last probe's error, "" after a success
	)
	logged := func(err error) {
		mu.Lock()
		defer mu.Unlock()
		switch {
		case err != nil && err.Error() != last:
			log.Warn("idem serve: /healthz: the store did not answer", "err", err)
			last = err.Error()
		case err == nil && last != "":
			log.Info("idem serve: /healthz: the store answers again")
			last = ""
		}
	}
	return func(ctx context.Context) (bool, string) {
		ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		start := time.Now()
		res, err := store.Claim(ctx, idem.Claim{Key: HealthKey, Lease: 5 * time.Second, Retention: time.Second})
		if err == nil && res.Outcome == idem.Acquired {
			err = store.Release(ctx, HealthKey, res.Token)
		}
		logged(err)
		if err != nil {
			return false, "unhealthy: the store did not answer: " + reason(err)
		}
		return true, fmt.Sprintf("ok: the store answered in %v", time.Since(start).Round(time.Microsecond))
	}
}
