package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/idemhq/idem"
)

// Problem types (RFC 9457 "type" members) of the API's error responses, each
// answered as application/problem+json with type, title, status and a detail that
// names the problem and its fix.
const (
	// ProblemUnauthorized: no token, or not a known one (401).
	ProblemUnauthorized = "urn:idem:problem:admin-unauthorized"
	// ProblemForbidden: the read token on a mutation, ?full=1 without the full
	// token, a cross-site request, or a non-loopback Host without a token (403).
	ProblemForbidden = "urn:idem:problem:admin-forbidden"
	// ProblemInvalid: a bad query parameter, path segment or body field, named in
	// the detail (400).
	ProblemInvalid = "urn:idem:problem:admin-invalid"
	// ProblemNotFound: no such key, dead letter, message or saga (404).
	ProblemNotFound = "urn:idem:problem:admin-not-found"
	// ProblemNotConfigured: the area of this route was not given in Config (404).
	ProblemNotConfigured = "urn:idem:problem:admin-not-configured"
	// ProblemNoRoute: no route has this method and path (404).
	ProblemNoRoute = "urn:idem:problem:admin-no-route"
	// ProblemConflict: the item is not in a state that allows the action, e.g. an
	// in-progress key evicted without force (409).
	ProblemConflict = "urn:idem:problem:admin-conflict"
	// ProblemNotImplemented: the store cannot do this, e.g. list its scopes (it
	// does not implement idem.ScopeLister) (501).
	ProblemNotImplemented = "urn:idem:problem:admin-not-implemented"
	// ProblemBodyTooLarge: the request body is over MaxBodyBytes (413).
	ProblemBodyTooLarge = "urn:idem:problem:admin-body-too-large"
	// ProblemUnsupportedMediaType: a mutation without Content-Type application/json (415).
	ProblemUnsupportedMediaType = "urn:idem:problem:admin-unsupported-media-type"
	// ProblemUnavailable: the backend failed (503); retry later.
	ProblemUnavailable = "urn:idem:problem:admin-unavailable"
	// ProblemTimeout: the backend did not answer within Config.Timeout (504).
	ProblemTimeout = "urn:idem:problem:admin-timeout"
	// ProblemInternal: an unexpected error, logged, not shown (500).
	ProblemInternal = "urn:idem:problem:admin-internal"
)

// ContentTypeProblem is the media type of RFC 9457 problem details.
const ContentTypeProblem = "application/problem+json"

// ErrConflict is returned by an area, wrapped with a message saying why, when the
// item is not in a state that allows the action (a saga that is not failed, a
// message that is not parked). It is answered 409 with the error's message.
var ErrConflict = errors.New("admin: the item's state does not allow this action")

// problem is an error answered as itself.
type problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail"`

	// refusal, if set, is why the request was refused before its route ran
	// (refusedNoToken…): it is counted, and its audit record rationed.
	refusal string
}

func (p *problem) Error() string { return p.Title + ": " + p.Detail }

func newProblem(status int, typ, detail string) *problem {
	return &problem{Type: typ, Title: http.StatusText(status), Status: status, Detail: detail}
}

func invalid(field, format string, args ...any) *problem {
	return newProblem(http.StatusBadRequest, ProblemInvalid, field+" "+fmt.Sprintf(format, args...))
}

func notFound(format string, args ...any) *problem {
	return newProblem(http.StatusNotFound, ProblemNotFound, fmt.Sprintf(format, args...))
}

// toProblem maps err to the problem to answer. logIt reports a failure of the
// server or its backends, which the operator should see in the log: its message is
// not shown to the client.
func toProblem(err error, what string) (p *problem, logIt bool) {
	var ie *idem.InputError
	var be *idem.BackendError
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &p):
		return p, false
	case errors.As(err, &mbe):
		return newProblem(http.StatusRequestEntityTooLarge, ProblemBodyTooLarge,
			"the request body is larger than "+strconv.FormatInt(mbe.Limit, 10)+" bytes: send less"), false
	case errors.As(err, &ie):
		return newProblem(http.StatusBadRequest, ProblemInvalid, ie.Field+" "+ie.Reason+fix(ie.Fix)), false
	case errors.Is(err, idem.ErrNotFound):
		return notFound("%s: not found", what), false
	case errors.Is(err, ErrConflict):
		return newProblem(http.StatusConflict, ProblemConflict, what+": "+err.Error()), false
	case errors.Is(err, context.DeadlineExceeded):
		return newProblem(http.StatusGatewayTimeout, ProblemTimeout, what+": the backend did not answer in time; retry later"), true
	case errors.Is(err, context.Canceled):
		// The client went away (or the server is shutting down): nobody reads this.
		return newProblem(http.StatusServiceUnavailable, ProblemUnavailable, what+": the request was canceled"), false
	case errors.As(err, &be):
		return newProblem(http.StatusServiceUnavailable, ProblemUnavailable,
			what+": the "+be.Backend+" backend failed during "+be.Op+"; retry later"), true
	}
	return newProblem(http.StatusInternalServerError, ProblemInternal, what+": internal error (see the server log)"), true
}

func fix(s string) string {
	if s == "" {
		return ""
	}
	return ": " + s
}

// writeJSON answers status with v as JSON. Nothing the API sends may be cached: it
// is live operational state, some of it sensitive.
func writeJSON(w http.ResponseWriter, status int, contentType string, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		status, contentType = http.StatusInternalServerError, ContentTypeProblem
		body, _ = json.Marshal(newProblem(status, ProblemInternal, "the response could not be encoded"))
	}
	writeBody(w, status, contentType, append(body, '\n'))
}

// writeBody answers status with body, already encoded as contentType.
func writeBody(w http.ResponseWriter, status int, contentType string, body []byte) {
	h := w.Header()
	h["Content-Type"] = []string{contentType}
	h["Cache-Control"] = []string{"no-store"}
	h["X-Content-Type-Options"] = []string{"nosniff"}
	h["Content-Length"] = []string{strconv.Itoa(len(body))}
	w.WriteHeader(status)
	_, _ = w.Write(body) // a client that left cannot be answered
}

func writeProblem(w http.ResponseWriter, p *problem) {
	if p.Status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="idem-admin"`)
	}
	writeJSON(w, p.Status, ContentTypeProblem, p)
}
