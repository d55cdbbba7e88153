package admin

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/admin/view"
)

// KeyRecord is a store's record as the API shows it (view.KeyRecordOf): never the
// whole stored result unless the full-access token asks for it (?full=1).
type KeyRecord = view.KeyRecord

// KeyPage is a page of GET /api/keys.
type KeyPage struct {
	Store   string      `json:"store"`
	Scope   string      `json:"scope"`
	Records []KeyRecord `json:"records"`
	Next    string      `json:"next"`
}

// store returns the named store, or the only one when name is empty.
func (h *handler) store(name string) (string, idem.Inspector, error) {
	if name == "" {
		if len(h.cfg.Stores) == 1 {
			for n, s := range h.cfg.Stores {
				return n, s, nil
			}
		}
		return "", nil, invalid("store", "is empty and %d stores are configured: name one (GET /api/stores)", len(h.cfg.Stores))
	}
	s, ok := h.cfg.Stores[name]
	if !ok {
		return "", nil, notFound("no store named %q: GET /api/stores lists them", view.Clean(name, 255))
	}
	return name, s, nil
}

// storeQuery reads the query of a request on one store, and the store it names.
func (h *handler) storeQuery(r *http.Request) (query, string, idem.Inspector, error) {
	q, err := parseQuery(r)
	if err != nil {
		return query{}, "", nil, err
	}
	name, s, err := h.store(q.get("store"))
	return q, name, s, err
}

func serveStores(h *handler, r *http.Request, c *call) (any, error) {
	names := make([]string, 0, len(h.cfg.Stores))
	for n := range h.cfg.Stores {
		names = append(names, n)
	}
	slices.Sort(names)
	return struct {
		Stores []string `json:"stores"`
	}{names}, nil
}

func serveKeys(h *handler, r *http.Request, c *call) (any, error) {
	q, name, s, err := h.storeQuery(r)
	if err != nil {
		return nil, err
	}
	scope := q.get("scope")
	if err := keyPart("scope", scope); err != nil {
		return nil, err
	}
	cursor, limit, err := q.page()
	if err != nil {
		return nil, err
	}
	page, err := s.List(r.Context(), scope, cursor, min(limit, idem.MaxListLimit))
	if err != nil {
		return nil, err
	}
	now := time.Now()
	records := viewsOf(page.Records, func(rec idem.Record) KeyRecord { return view.KeyRecordOf(name, rec, now, false) })
	return KeyPage{Store: name, Scope: scope, Records: records, Next: page.Next}, nil
}

// keyArgs checks a key's store, scope and id.
func (h *handler) keyArgs(store, scope, id string) (string, idem.Inspector, idem.Key, error) {
	name, s, err := h.store(store)
	if err != nil {
		return "", nil, idem.Key{}, err
	}
	if err := keyPart("scope", scope); err != nil {
		return "", nil, idem.Key{}, err
	}
	if err := keyPart("id", id); err != nil {
		return "", nil, idem.Key{}, err
	}
	return name, s, idem.Key{Scope: scope, ID: id}, nil
}

func noKey(name string, k idem.Key) error {
	return notFound("no record for key scope=%q id=%q in store %q", k.Scope, k.ID, name)
}

func serveKey(h *handler, r *http.Request, c *call) (any, error) {
	q, err := parseQuery(r)
	if err != nil {
		return nil, err
	}
	full, err := q.flag("full")
	if err != nil {
		return nil, err
	}
	if full && !c.full() {
		return nil, refusedRead("full=1 shows the stored result: use the full-access token")
	}
	name, s, k, err := h.keyArgs(q.get("store"), q.get("scope"), q.get("id"))
	if err != nil {
		return nil, err
	}
	rec, err := s.Inspect(r.Context(), k)
	if errors.Is(err, idem.ErrNotFound) {
		return nil, noKey(name, k)
	} else if err != nil {
		return nil, err
	}
	rec.Key = k
	return view.KeyRecordOf(name, rec, time.Now(), full), nil
}

type evictRequest struct {
	Store  string `json:"store"`
	Scope  string `json:"scope"`
	ID     string `json:"id"`
	Force  bool   `json:"force"`
	Reason string `json:"reason"`
}

func serveEvict(h *handler, r *http.Request, c *call) (any, error) {
	var req evictRequest
	if err := decode(r, &req); err != nil {
		return nil, err
	}
	c.target = []any{slog.String("store", view.Clean(req.Store, 255)), slog.String("scope", view.Clean(req.Scope, 255)),
		slog.String("id", view.Clean(req.ID, 255)), slog.Bool("force", req.Force)}
	if err := reason(c, "reason", req.Reason); err != nil {
		return nil, err
	}
	name, s, k, err := h.keyArgs(req.Store, req.Scope, req.ID)
	if err != nil {
		return nil, err
	}
	rec, err := s.Evict(r.Context(), k, req.Force)
	var ie *idem.InputError
	switch {
	case errors.Is(err, idem.ErrNotFound):
		return nil, noKey(name, k)
	case errors.As(err, &ie) && ie.Field == "force":
		return nil, newProblem(http.StatusConflict, ProblemConflict,
			fmt.Sprintf("key scope=%q id=%q is in progress: set force to true to evict it and fence its holder out", k.Scope, k.ID))
	case err != nil:
		return nil, err
	}
	rec.Key = k
	return view.KeyRecordOf(name, rec, time.Now(), false), nil
}
