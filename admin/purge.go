package admin

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/idemhq/idem/admin/view"
)

// Purger is the optional capability of an Effects or Sagas area to delete its
// finished rows at once: complete effects, or completed, compensated and resolved
// sagas, whose last change is older than olderThan. Nothing in progress or waiting
// for an operator is deleted. EffectsFrom and SagasFrom implement it.
type Purger interface {
	Purge(ctx context.Context, olderThan time.Duration) (int, error)
}

// MinPurgeAge is the youngest finished row a purge may delete: a younger one may
// still be retried by its caller, which would then run its effect again.
const MinPurgeAge = time.Hour

// Purged is the answer to a purge.
type Purged struct {
	// Deleted is how many rows the purge deleted.
	Deleted int `json:"deleted"`
	// Complete is false when the purge stopped at the request's timeout, with
	// Deleted rows gone: send it again to go on.
	Complete bool `json:"complete"`
}

type purgeRequest struct {
	OlderThan string `json:"older_than"`
	Reason    string `json:"reason"`
}

var purgeBody = []param{
	{name: "older_than", typ: "string", required: true,
		doc: "a Go duration, at least 1h: delete finished rows whose last change is older, such as 720h"},
	pReason,
}

// purgeRoute is the POST …/purge route of area, which deletes its finished rows
// (what).
func purgeRoute(path, area, what string, of func(h *handler) any) route {
	return route{method: "POST", path: path, area: area, mutates: true, summary: "purge " + what, body: purgeBody,
		serve: func(h *handler, r *http.Request, c *call) (any, error) { return servePurge(r, c, of(h), what) }}
}

func servePurge(r *http.Request, c *call, area any, what string) (any, error) {
	var req purgeRequest
	if err := decode(r, &req); err != nil {
		return nil, err
	}
	age, err := time.ParseDuration(req.OlderThan)
	switch {
	case err != nil:
		return nil, invalid("older_than", "is %q, not a duration: send one such as \"720h\"", view.Clean(req.OlderThan, 64))
	case age < MinPurgeAge:
		return nil, invalid("older_than", "is %v: send at least %v, so rows a caller may still retry are kept", age, MinPurgeAge)
	}
	c.target = []any{slog.String("older_than", age.String())}
	if err := reason(c, "reason", req.Reason); err != nil {
		return nil, err
	}
	p, ok := area.(Purger)
	if !ok {
		return nil, newProblem(http.StatusNotImplemented, ProblemNotImplemented,
			fmt.Sprintf("this server's %s area cannot purge: configure it with EffectsFrom or SagasFrom", what))
	}
	n, err := p.Purge(r.Context(), age)
	if err != nil && n > 0 && r.Context().Err() != nil {
		return Purged{Deleted: n}, nil // the timeout: what was deleted stays deleted
	}
	if err != nil {
		return nil, err
	}
	return Purged{Deleted: n, Complete: true}, nil
}

func (e effectsArea[Tx]) Purge(ctx context.Context, olderThan time.Duration) (int, error) {
	return e.a.Purge(ctx, olderThan)
}

func (s sagasArea[Tx]) Purge(ctx context.Context, olderThan time.Duration) (int, error) {
	return s.a.Purge(ctx, olderThan)
}
