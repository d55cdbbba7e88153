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
