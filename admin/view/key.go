package view

import (
	"encoding/hex"
	"fmt"
	"strconv"
	"time"

	"github.com/idemhq/idem"
)

// KeyRecord is a store's record as an operator sees it: never the whole stored
// result unless asked for.
type KeyRecord struct {
	// Store names the store: one of the admin API's Config.Stores, or the store
	// the CLI opened.
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

// KeyRecordOf is rec of store as of now; full shows its whole result.
func KeyRecordOf(store string, rec idem.Record, now time.Time, full bool) KeyRecord {
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
		Result: NewPreview(rec.Result, full), HTTP: stored,
	}
}

// StateText is the record's state for a table, marked when expired.
func (r KeyRecord) StateText() string {
	if r.Expired {
		return r.State + " (expired)"
	}
	return r.State
}

// ResultText is the record's result as a table shows it: a stored HTTP response
// as its status, content type and body preview, anything else as its preview.
func (r KeyRecord) ResultText() string {
	h := r.HTTP
	if h == nil {
		return r.Result.Text()
	}
	s := "HTTP " + strconv.Itoa(h.Status)
	if h.ContentType != "" {
		s += " " + Escape(h.ContentType, 40)
	}
	if h.NotStored {
		return s + fmt.Sprintf(" (not stored: %d bytes)", h.Body.Size)
	}
	return s + " " + h.Body.Text()
}
