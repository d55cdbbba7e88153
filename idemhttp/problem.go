package idemhttp

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"
)

// Problem types (RFC 9457 "type" members) of the responses the middleware produces
// itself. Clients may branch on them; each response also carries a human-readable
// detail naming the problem and its fix.
const (
	// ProblemInvalidKey: the Idempotency-Key header is missing where required,
	// repeated, or not 1 to 255 printable ASCII characters (400).
	ProblemInvalidKey = "urn:idem:problem:invalid-idempotency-key"
	// ProblemInvalidScope: the request's scope (tenant) could not be determined (400).
	ProblemInvalidScope = "urn:idem:problem:invalid-scope"
	// ProblemBodyTooLarge: the request body is larger than Config.MaxBodyBytes (413).
	ProblemBodyTooLarge = "urn:idem:problem:body-too-large"
	// ProblemInProgress: a request with the same key is still running (409); retry
	// after Retry-After seconds with the same key.
	ProblemInProgress = "urn:idem:problem:key-in-progress"
	// ProblemMismatch: the key was already used for a different request (422); do
	// not retry, use a new key for a new request.
	ProblemMismatch = "urn:idem:problem:key-reused"
	// ProblemStoreUnavailable: the idempotency store failed, so the request was not
	// run (503); retry after Retry-After seconds with the same key.
	ProblemStoreUnavailable = "urn:idem:problem:store-unavailable"
	// ProblemOverloaded: Config.MaxInFlight keyed requests are already running, so
	// this one was not read nor run (503); retry after Retry-After seconds with the
	// same key.
	ProblemOverloaded = "urn:idem:problem:overloaded"
	// ProblemNotRecorded: the handler ran in atomic mode but its response could not
	// be stored with its effects, so both were rolled back (500 or 503); a retry with
	// the same key runs the request again.
	ProblemNotRecorded = "urn:idem:problem:not-recorded"
	// ProblemResponseTooLarge: the request with this key was run, but its response
	// was too large to store (Config.MaxBodyBytes), so it cannot be replayed (500).
	// The request is not run again: do not retry; use a new key only to run a new
	// request.
	ProblemResponseTooLarge = "urn:idem:problem:response-too-large"
	// ProblemCorruptRecord: a stored response could not be decoded (500).
	ProblemCorruptRecord = "urn:idem:problem:corrupt-record"
	// ProblemKeyExpired: the key's embedded time (UUIDv7, ULID) is older than
	// Config.MaxKeyAge, so the request was not run (410 Gone, as Restate answers
	// after its retention): its record may be forgotten, and running it again could
	// repeat its effect. It is refused before the store is asked, even if a record
	// happens to remain: a key past the window has by definition no record to rely
	// on, and checking first is cheaper and gives every replica the same answer. Do
	// not retry: find out whether the first attempt took effect, and send a new
	// request with a new key only if it did not.
	ProblemKeyExpired = "urn:idem:problem:key-expired"
	// ProblemKeyFromFuture: the key's embedded time is more than idemkey.MaxSkew
	// ahead of the server's clock (400): the client's clock is wrong, and such a key
	// would stay fresh longer than its record. Fix the client's clock (NTP).
	ProblemKeyFromFuture = "urn:idem:problem:key-from-future"
	// ProblemUntimedKey: the key carries no time (it is not a UUIDv7 or ULID) and
	// Config.RequireTimedKeys is set (400): send a UUIDv7 (idemkey.NewV7) or ULID.
	ProblemUntimedKey = "urn:idem:problem:untimed-key"
	// ProblemDeadlinePassed: the request's Idem-Deadline (idem.HeaderDeadline) had
	// passed by the server's clock when it arrived, so it was not run (412
	// Precondition Failed: the deadline is a condition of the request, and, unlike
	// 408 or 504, no common client nor Transport retries a 412). The sender had
	// given up by then; a new attempt needs a new deadline, and a new key if the
	// caller wants it run as a new request.
	ProblemDeadlinePassed = "urn:idem:problem:deadline-passed"
	// ProblemInvalidDeadline: the Idem-Deadline header is repeated or not an RFC 3339
	// time (400); send it once, as idem.FormatDeadline writes it.
	ProblemInvalidDeadline = "urn:idem:problem:invalid-deadline"
)

// ContentTypeProblem is the media type of RFC 9457 problem details.
const ContentTypeProblem = "application/problem+json"

type problemBody struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail"`
}

// writeProblem answers with an RFC 9457 problem. retryAfter > 0 adds a Retry-After
// header in whole seconds. Headers set by outer middleware (CORS, tracing) stay.
func writeProblem(w http.ResponseWriter, status int, typ, title, detail string, retryAfter time.Duration) {
	h := w.Header()
	h["Content-Type"] = []string{ContentTypeProblem}
	// A problem is about this attempt, never a result to be cached by a proxy.
	h["Cache-Control"] = []string{"no-store"}
	if retryAfter > 0 {
		h["Retry-After"] = []string{strconv.Itoa(retryAfterSeconds(retryAfter))}
	}
	body, _ := json.Marshal(problemBody{Type: typ, Title: title, Status: status, Detail: detail})
	body = append(body, '\n')
	h["Content-Length"] = []string{strconv.Itoa(len(body))}
	w.WriteHeader(status)
	_, _ = w.Write(body) // a client that left cannot be answered
}

// retryAfterSeconds rounds d up to whole seconds, at least 1: Retry-After 0 would
// invite an immediate retry that finds the same state.
func retryAfterSeconds(d time.Duration) int {
	s := int((d + time.Second - 1) / time.Second)
	return max(s, 1)
}
