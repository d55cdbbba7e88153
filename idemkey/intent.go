package idemkey

import (
	"crypto/sha1"
	"encoding/binary"

	"github.com/google/uuid"
)

// The names below fix every intent and derived key ever made: changing them, or the
// encoding in hashKey, changes all keys and breaks deduplication across a deploy.
// TestGolden pins them.
const (
	namespacePrefix = "urn:idem:intent:"
	deriveName      = "urn:idem:derive"
)

// deriveSpace is the namespace of Derive. No NewNamespace name reaches it, since
// those all hash a name starting with namespacePrefix, so derived keys and intent keys
// never share a namespace.
var deriveSpace = uuid.NewSHA1(uuid.NameSpaceURL, []byte(deriveName))

// Namespace separates families of intent keys: the same fields under two namespaces
// give two unrelated keys, so "checkout" and "refund" intents of one cart never
// collide. Make one with NewNamespace, once per kind of intent.
type Namespace struct{ id uuid.UUID }

// NewNamespace returns the namespace for name. It is deterministic, so every producer
// and every deploy that uses the same name makes the same keys.
func NewNamespace(name string) Namespace {
	return Namespace{uuid.NewSHA1(uuid.NameSpaceURL, []byte(namespacePrefix+name))}
}

// String returns the namespace as a UUID, for logs.
func (ns Namespace) String() string { return ns.id.String() }

// Intent returns the UUIDv5 key of a logical intent: the same fields under the same
// namespace always give the same key, so producers that never coordinate (two browser
// tabs, a retried job, a replayed import) still agree on one key per intent.
//
// The fields are encoded unambiguously before hashing: each is length-prefixed and
// their number counts, so ("ab", "c"), ("a", "bc") and ("a", "b", "c") give three
// different keys.
//
// Choose the fields with care, in both directions:
//
//   - Hash the intent, not just the payload. Two legitimately distinct orders with
//     identical contents (same cart, same items) would otherwise collapse into one and
//     the second would be dropped as a duplicate. Include what makes an intent unique,
//     such as the cart id and the client's timestamp of the click.
//   - Leave out whatever changes between retries of one intent, such as the time of
//     sending, an attempt counter or a trace id; otherwise every retry looks new and
//     runs again.
func Intent(ns Namespace, fields ...string) string {
	return hashKey(ns.id, fields...)
}

// Derive returns the key for one step taken under the parent key: a call to an
// external API, a saga step, a message emitted while handling another. It is
// deterministic, so a consumer that retries after a crash passes the same key to the
// payment provider every time and the provider deduplicates it; distinct steps get
// distinct keys, so two calls made for one message are not taken for one.
//
// Derived keys chain (Derive(Derive(k, "saga"), "reserve")) and are UUIDv5s of 36
// characters, so they always pass ValidateHeader and fit any provider's
// Idempotency-Key header whatever the parent's length. Give each step a stable name;
// a step repeated in a loop needs its index in the name ("line-3").
func Derive(parent, step string) string {
	return hashKey(deriveSpace, parent, step)
}

// hashKey returns the UUIDv5 (RFC 9562, section 5.5) of the encoded fields under
// space: what uuid.NewSHA1 computes, without its allocations.
//
// The fields are encoded as their number, then each field's length and bytes, with
// unsigned varints: no two distinct field lists encode alike.
func hashKey(space uuid.UUID, fields ...string) string {
	var buf [256]byte // most intents fit, and then nothing escapes
	b := append(buf[:0], space[:]...)
	b = binary.AppendUvarint(b, uint64(len(fields)))
	for _, f := range fields {
		b = binary.AppendUvarint(b, uint64(len(f)))
		b = append(b, f...)
	}
	sum := sha1.Sum(b)
	u := uuid.UUID(sum[:16])
	u[6] = u[6]&0x0f | 0x50 // version 5
	u[8] = u[8]&0x3f | 0x80 // RFC 9562 variant
	return u.String()
}
