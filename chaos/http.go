package chaos

import (
	"errors"
	"io"
	"net/http"
	"sync"
)

// Faults of the client → HTTP boundary, injected by Transport.
const (
	// FaultDropResponse: the server executed the request, and its response is lost
	// on the way back; the client sees a network error and retries.
	FaultDropResponse = "http_response_dropped"
	// FaultDuplicateRequest: the request is sent twice at once (a double click, a
	// proxy retrying on its own); the client sees one of the two responses.
	FaultDuplicateRequest = "http_duplicate_request"
)

// headerKey is the request header idemhttp.HeaderKey names; chaos does not import
// idemhttp, so that it imports nothing of idem but the root.
const headerKey = "Idempotency-Key"

// ErrInjected is the error of an operation a fault broke on purpose.
var ErrInjected = errors.New("chaos: injected fault")

// Transport is an http.RoundTripper that breaks requests on their way to Base: it
// drops responses after the server executed the request and sends concurrent
// duplicates. Put it under idemhttp.Transport (as its Base) to see the client's
// retries absorb the faults, or under a plain client to see them doubled.
//
// Other fault kinds in Faults are handed to OnFault before the request is sent,
// so a flow can tie faults of its own (a clock jump, a database cut) to requests.
// Requests are identified by their Idempotency-Key header (or URL without one).
type Transport struct {
	Base     http.RoundTripper
	Injector *Injector
	Faults   []Fault
	OnFault  func(kind string)

	mu       sync.Mutex
	attempts map[string]int
}

// RoundTrip sends req through Base, perhaps with a fault.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	base := t.Base
	if base == nil {
		base = http.DefaultTransport
	}
	id := req.Header.Get(headerKey)
	if id == "" {
		id = req.Method + " " + req.URL.String()
	}
	t.mu.Lock()
	if t.attempts == nil {
		t.attempts = make(map[string]int)
	}
	t.attempts[id]++
	attempt := t.attempts[id]
	t.mu.Unlock()

	switch fault := t.Injector.Roll("http "+id, attempt, t.Faults); fault {
	case "":
	case FaultDropResponse:
		resp, err := base.RoundTrip(req)
		if err != nil {
			return nil, err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return nil, ErrInjected
	case FaultDuplicateRequest:
		if req.Body != nil && req.GetBody == nil {
			break // the body cannot be sent twice
		}
		dup := req.Clone(req.Context())
		if req.GetBody != nil {
			body, err := req.GetBody()
			if err != nil {
				return nil, err
			}
			dup.Body = body
		}
		done := make(chan struct{})
		go func() {
			defer close(done)
			if resp, err := base.RoundTrip(dup); err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}()
		resp, err := base.RoundTrip(req)
		<-done
		return resp, err
	default:
		if t.OnFault != nil {
			t.OnFault(fault)
		}
	}
	return base.RoundTrip(req)
}
