package idemkey

import (
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/idemhq/idem"
	"github.com/oklog/ulid/v2"
)

// Kind is the strategy a key was made with, as far as its text tells. It decides what
// a consumer can do with the key: only UUIDv7 and ULID keys carry a time.
type Kind int

const (
	// KindOpaque is any valid key that is not one of the kinds below: a client's own
	// token, a sequence number, a scoped name. The consumer can only remember it.
	KindOpaque Kind = iota
	// KindUUIDv4 is a random UUID (NewV4): unique, but without a time.
	KindUUIDv4
	// KindUUIDv5 is a name-based UUID, as made by Intent and Derive: deterministic,
	// without a time.
	KindUUIDv5
	// KindUUIDv7 is a time-ordered UUID (NewV7) carrying its creation time.
	KindUUIDv7
	// KindULID is a ULID (NewULID) carrying its creation time.
	KindULID
)

var kindNames = [...]string{"opaque", "UUIDv4", "UUIDv5", "UUIDv7", "ULID"}

// String names the kind for logs and error messages.
func (k Kind) String() string {
	if k >= 0 && int(k) < len(kindNames) {
		return kindNames[k]
	}
	return "Kind(" + strconv.Itoa(int(k)) + ")"
}

// Parse classifies a key. The error is only for keys that are invalid (see Validate);
// any other key is at least KindOpaque, because producers are free to use their own
// scheme.
//
// UUIDs are recognised only in the canonical 36-character form, in either case, with
// the RFC 9562 variant; ULIDs as 26 characters of Crockford base32, in either case,
// without overflow (first character at most '7'). The recognition is by shape: an
// opaque key that happens to look like a ULID is taken for one, so enable freshness
// checks (Stale) only for producers known to send time-based keys.
func Parse(s string) (Kind, error) {
	if err := Validate(s); err != nil {
		return KindOpaque, err
	}
	k, _, _ := classify(s)
	return k, nil
}

// classify returns the kind of a valid key and, for UUIDs and ULIDs, the decoded
// value.
func classify(s string) (Kind, uuid.UUID, ulid.ULID) {
	switch len(s) {
	case 36:
		u, err := uuid.Parse(s)
		if err != nil || u.Variant() != uuid.RFC4122 {
			return KindOpaque, u, ulid.ULID{}
		}
		switch u.Version() {
		case 4:
			return KindUUIDv4, u, ulid.ULID{}
		case 5:
			return KindUUIDv5, u, ulid.ULID{}
		case 7:
			return KindUUIDv7, u, ulid.ULID{}
		}
	case ulid.EncodedSize:
		if id, err := ulid.ParseStrict(s); err == nil { // rejects overflow too
			return KindULID, uuid.UUID{}, id
		}
	}
	return KindOpaque, uuid.UUID{}, ulid.ULID{}
}

// TimeOf returns the creation time a valid UUIDv7 or ULID key carries, and false
// for any other key, without building an error: the form for a hot path that has
// validated the key already and only asks whether it can be judged (Time says why
// not).
func TimeOf(key string) (time.Time, bool) {
	if len(key) != 36 && len(key) != ulid.EncodedSize {
		return time.Time{}, false
	}
	switch kind, u, id := classify(key); kind {
	case KindUUIDv7:
		ms := int64(u[0])<<40 | int64(u[1])<<32 | int64(u[2])<<24 | int64(u[3])<<16 | int64(u[4])<<8 | int64(u[5])
		return time.UnixMilli(ms).UTC(), true
	case KindULID:
		return time.UnixMilli(int64(id.Time())).UTC(), true
	}
	return time.Time{}, false
}

// Time returns the creation time a UUIDv7 or ULID key carries, in UTC with millisecond
// precision. Any other key carries no time, and Time says so with an *idem.InputError
// for the field "key": a consumer that needs a key's age must ask its producers for
// time-based keys, or track a per-producer sequence (package idemseq).
func Time(key string) (time.Time, error) {
	if err := Validate(key); err != nil {
		return time.Time{}, err
	}
	if t, ok := TimeOf(key); ok {
		return t, nil
	}
	kind, _, _ := classify(key)
	article := "a "
	if kind == KindOpaque {
		article = "an "
	}
	return time.Time{}, &idem.InputError{Field: "key",
		Reason: "carries no time: it is " + article + kind.String() + " key",
		Fix:    "have the producer send UUIDv7 or ULID keys (idemkey.NewV7, idemkey.NewULID), or track a per-producer sequence (idemseq)"}
}
