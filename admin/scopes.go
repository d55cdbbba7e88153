package admin

import (
	"fmt"
	"net/http"

	"github.com/idemhq/idem"
)

// ScopePage is a page of GET /api/scopes: the scopes the store holds records in,
// without counts (a count would cost a scan of each scope's records).
type ScopePage struct {
	Store  string   `json:"store"`
	Scopes []string `json:"scopes"`
	Next   string   `json:"next"`
}

func serveScopes(h *handler, r *http.Request, c *call) (any, error) {
	q, name, s, err := h.storeQuery(r)
	if err != nil {
		return nil, err
	}
	cursor, limit, err := q.page()
	if err != nil {
		return nil, err
	}
	sl, ok := s.(idem.ScopeLister)
	if !ok {
		return nil, newProblem(http.StatusNotImplemented, ProblemNotImplemented,
			fmt.Sprintf("store %q cannot list its scopes (it does not implement idem.ScopeLister): "+
				"list a known scope's keys with GET /api/keys?scope=", name))
	}
	page, err := sl.Scopes(r.Context(), cursor, min(limit, idem.MaxListLimit))
	if err != nil {
		return nil, err
	}
	out := ScopePage{Store: name, Scopes: page.Scopes, Next: page.Next}
	if out.Scopes == nil {
		out.Scopes = []string{}
	}
	return out, nil
}
