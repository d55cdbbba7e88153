package admin

import (
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/idemhq/idem"
)

// KeyRecord is a store's record as the API shows it: never the whole stored
// result unless the full-access token asks for it (?full=1).
type KeyRecord struct {
	Store string `json:"store"`
	Scope string `json:"scope"`
	ID    string `json:"id"`
	// State is "in_progress" or "completed".
	State string `json:"state"`
	// Expired: the lease (in progress) or retention (completed) has passed, but no
	// sweep has removed the record yet.
	Expired     bool   `json:"expired"`
	Fingerprint string `json:"fingerprint"` // hex
	// Token is the holder's fencing token, in decimal (a JSON number would lose
	// precision above 2^53).
	Token     string    `json:"token"`
	CreatedAt time.Time `json:"created_at,omitzero"`
	ExpiresAt time.Time `json:"expires_at,omitzero"`
	// Result is a preview of the stored bytes, whatever their format.
	Result Preview `json:"result"`
	// HTTP is the stored result read as the response idemhttp (and idem serve)
	// stored for replay; absent for any other result (an inbox's, an effect's).
	HTTP *StoredHTTP `json:"http,omitempty"`
}

func keyRecord(store string, rec idem.Record, now time.Time, full bool) KeyRecord {
	var stored *StoredHTTP
	if v, ok := DecodeStoredHTTP(rec.Result); ok {
		stored = &v
	}
	return KeyRecord{
		Store: store, Scope: rec.Key.Scope, ID: rec.Key.ID,
		State:       rec.State.String(),
		Expired:     !rec.ExpiresAt.IsZero() && !rec.ExpiresAt.After(now),
		Fingerprint: hex.EncodeToString(rec.Fingerprint),
		Token:       strconv.FormatUint(rec.Token, 10),
		CreatedAt:   rec.CreatedAt, ExpiresAt: rec.ExpiresAt,
		Result: preview(rec.Result, full), HTTP: stored,
	}
}

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
		return "", nil, notFound("no store named %q: GET /api/stores lists them", clean(name, 255))
	}
	return name, s, nil
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
	q, err := parseQuery(r)
	if err != nil {
		return nil, err
	}
	name, s, err := h.store(q.get("store"))
	if err != nil {
		return nil, err
	}
	scope := q.get("scope")
	if err := keyPart("scope", scope); err != nil {
		return nil, err
	}
	cursor, err := q.cursor()
	if err != nil {
		return nil, err
	}
	limit, err := q.limit()
	if err != nil {
		return nil, err
	}
	page, err := s.List(r.Context(), scope, cursor, min(limit, idem.MaxListLimit))
	if err != nil {
		return nil, err
	}
	now := time.Now()
	out := KeyPage{Store: name, Scope: scope, Records: make([]KeyRecord, 0, len(page.Records)), Next: page.Next}
	for _, rec := range page.Records {
		out.Records = append(out.Records, keyRecord(name, rec, now, false))
	}
	return out, nil
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
	return keyRecord(name, rec, time.Now(), full), nil
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
	c.target = []any{slog.String("store", clean(req.Store, 255)), slog.String("scope", clean(req.Scope, 255)),
		slog.String("id", clean(req.ID, 255)), slog.Bool("force", req.Force)}
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
	return keyRecord(name, rec, time.Now(), false), nil
}
