package idemhttp

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"hash"
	"io"
	"net/http"
	"slices"
	"strconv"
	"sync"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemkey"
)

// recorder captures the handler's response so it can be stored before the client
// sees it. The handler writes its headers into the real response's header map (no
// copy); the status and body are held back in buf until the middleware has stored
// them. A response that will not be stored (429, a 5xx under StoreServerErrors=false,
// or a body beyond the limit) is streamed to the client instead, as the handler
// writes it.
type recorder struct {
	w http.ResponseWriter
	// limit is the largest body that can be stored; holdOversize keeps an oversized
	// body from the client (atomic mode: it must not be seen before a commit)
	// instead of streaming it.
	limit        int
	storeErrors  bool
	holdOversize bool

	status      int
	wroteHeader bool
	// direct: the response goes to the client as written, and is not stored.
	direct bool
	// oversize: the body went beyond limit (streamed, or dropped when held).
	oversize bool
	buf      []byte
	// size counts the body bytes the handler wrote.
	size int64
}

func (rec *recorder) reset(w http.ResponseWriter, limit int, storeErrors, holdOversize bool) {
	*rec = recorder{w: w, limit: limit, storeErrors: storeErrors, holdOversize: holdOversize, buf: rec.buf[:0]}
}

// Header returns the real response's headers: the handler's headers go to the client
// as set, and the allow-listed ones are read from here when storing.
func (rec *recorder) Header() http.Header { return rec.w.Header() }

func (rec *recorder) WriteHeader(code int) {
	if rec.wroteHeader {
		return
	}
	if (code >= 100 && code < 200 && code != http.StatusSwitchingProtocols) || code < 100 || code > 999 {
		// Informational (103 Early Hints) is not the result; an invalid code makes
		// net/http panic here, inside the handler, where the key is released.
		rec.w.WriteHeader(code)
		return
	}
	rec.wroteHeader = true
	rec.status = code
	if code == http.StatusTooManyRequests || (code >= 500 && !rec.storeErrors) {
		// Not a result: a rate limit, or a failure the caller wants retried.
		rec.direct = true
		rec.w.WriteHeader(code)
	}
}

func (rec *recorder) Write(p []byte) (int, error) {
	if !rec.wroteHeader {
		rec.WriteHeader(http.StatusOK)
	}
	rec.size += int64(len(p))
	if rec.direct {
		return rec.w.Write(p)
	}
	if len(rec.buf)+len(p) <= rec.limit {
		rec.buf = append(rec.buf, p...)
		return len(p), nil
	}
	rec.oversize = true
	if rec.holdOversize {
		rec.buf = rec.buf[:0] // never sent: the middleware answers with a problem
		return len(p), nil
	}
	// Too large to store: stream it instead, so the client still gets it whole.
	rec.direct = true
	rec.w.WriteHeader(rec.status)
	if len(rec.buf) > 0 {
		if _, err := rec.w.Write(rec.buf); err != nil {
			return 0, err
		}
	}
	return rec.w.Write(p)
}

// Flush passes through once the response is streamed; while it is held back for
// storage there is nothing the client may see yet.
func (rec *recorder) Flush() {
	if rec.direct {
		_ = http.NewResponseController(rec.w).Flush()
	}
}

// Unwrap lets http.ResponseController reach the connection (deadlines, full duplex).
func (rec *recorder) Unwrap() http.ResponseWriter { return rec.w }

// held reports whether the response is held back to be stored: the handler wrote
// a status that is a result and a body that fits.
func (rec *recorder) held() bool { return !rec.direct && !rec.oversize }

// finishHeader records the implicit 200 of a handler that wrote nothing, and gives
// a body without a Content-Type the type net/http would sniff, so the first response
// and its replays carry the same header.
func (rec *recorder) finishHeader() {
	if !rec.wroteHeader {
		rec.WriteHeader(http.StatusOK)
	}
	if !rec.held() || len(rec.buf) == 0 {
		return
	}
	h := rec.w.Header()
	if _, ok := h["Content-Type"]; !ok {
		h["Content-Type"] = []string{http.DetectContentType(rec.buf)}
	}
}

// writeHeld sends the held response to the client.
func (rec *recorder) writeHeld() {
	writeResponse(rec.w, rec.status, rec.buf)
}

// chunkingSize is net/http's bufferBeforeChunkingSize: a handler that writes at
// most this much gets a Content-Length from net/http; a larger body is chunked
// unless the handler set one.
const chunkingSize = 2048

// writeResponse writes status and body with an exact Content-Length (net/http's for
// small bodies, ours beyond chunkingSize), so the connection is kept alive without
// chunking.
func writeResponse(w http.ResponseWriter, status int, body []byte) {
	if bodyAllowed(status) && len(body) > chunkingSize {
		w.Header()["Content-Length"] = []string{strconv.Itoa(len(body))}
	}
	w.WriteHeader(status)
	if len(body) > 0 && bodyAllowed(status) {
		_, _ = w.Write(body) // the client may have left; the result is stored anyway
	}
}

func bodyAllowed(status int) bool {
	return status != http.StatusNoContent && status != http.StatusNotModified && status >= 200
}

// mwRequest is the state of one request through the middleware, pooled: the request
// body as read, the hasher, the claim and the response recorder.
type mwRequest struct {
	body    []byte
	reader  mwBody
	rec     recorder
	hasher  hash.Hash
	scratch []byte
	fp      [sha256.Size]byte
	claim   idem.Claim
	// pre are the response headers set before the handler ran (by outer
	// middleware: CORS, request ids); they belong to each attempt, not to the result.
	pre []preHeader
	// names are the response header names to store, in encoding order.
	names []string
}

// mwPoolMax is the largest buffer kept in the pool; bigger ones are left to the GC
// so a rare large request does not pin its memory.
const mwPoolMax = 64 << 10

var mwRequestPool = sync.Pool{New: func() any { return &mwRequest{hasher: sha256.New()} }}

func getMWRequest() *mwRequest { return mwRequestPool.Get().(*mwRequest) }

func putMWRequest(q *mwRequest) {
	if cap(q.body) > mwPoolMax {
		q.body = nil
	}
	if cap(q.rec.buf) > mwPoolMax {
		q.rec.buf = nil
	}
	q.reader.Reset(nil)
	q.rec.w = nil
	clear(q.pre)
	q.pre = q.pre[:0]
	clear(q.names)
	q.names = q.names[:0]
	q.claim = idem.Claim{}
	mwRequestPool.Put(q)
}

// mwBody re-supplies the request body, read by the middleware, to the handler.
type mwBody struct{ bytes.Reader }

func (*mwBody) Close() error { return nil }

// readBody reads the request body into q.body, at most limit+1 bytes, and reports
// whether it is larger than limit. A declared Content-Length beyond the limit is
// oversize before anything is read.
func (q *mwRequest) readBody(r *http.Request, limit int) (oversize bool, err error) {
	q.body = q.body[:0]
	if r.Body == nil || r.Body == http.NoBody {
		return false, nil
	}
	if r.ContentLength > int64(limit) {
		return true, nil
	}
	want := limit + 1
	buf := q.body
	if r.ContentLength >= 0 {
		// Room for the whole body and the read that reports EOF.
		buf = slices.Grow(buf, int(r.ContentLength)+1)
	}
	for len(buf) < want {
		if len(buf) == cap(buf) {
			buf = slices.Grow(buf, min(max(cap(buf), 512), want-len(buf)))
		}
		n, err := r.Body.Read(buf[len(buf):min(cap(buf), want)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			break
		}
		if err != nil {
			q.body = buf
			return false, err
		}
	}
	q.body = buf
	return len(buf) > limit, nil
}

// prefixedBody is the request body for a pass-through after readBody stopped at the
// limit: what was read, then the rest.
func (q *mwRequest) prefixedBody(rest io.ReadCloser) io.ReadCloser {
	return struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(q.body), rest), rest}
}

// handlerRequest is r as the handler sees it: with ctx, and the body it sent.
//
// The handler's context carries the request's key lineage (idem.WithKey): the key
// derived from the Idempotency-Key and its scope, so the handler's own calls through
// a Transport carry keys derived from it, the same on every retry of the request.
func (q *mwRequest) handlerRequest(ctx context.Context, r *http.Request) *http.Request {
	id, scope := q.claim.Key.ID, q.claim.Key.Scope
	hr := r.WithContext(idem.WithKeyFunc(ctx, func() string { return idemkey.Derive(id, scope) }))
	q.reader.Reset(q.body)
	hr.Body = &q.reader
	return hr
}

// fingerprint hashes the request's intent into q.fp: SHA-256 over the method, the
// escaped path, the raw query, each fingerprinted header's name and values, and the
// body. Every field is length-prefixed, so no bytes can move from one field to the
// next under the same hash.
func (q *mwRequest) fingerprint(r *http.Request, headers []string) {
	b := q.scratch[:0]
	b = appendField(b, r.Method)
	b = appendField(b, r.URL.EscapedPath())
	b = appendField(b, r.URL.RawQuery)
	for _, name := range headers {
		vs := r.Header[name]
		b = appendField(b, name)
		b = binary.AppendUvarint(b, uint64(len(vs)))
		for _, v := range vs {
			b = appendField(b, v)
		}
	}
	b = binary.AppendUvarint(b, uint64(len(q.body)))
	if len(q.body) <= fingerprintCopyMax {
		// One contiguous buffer hashed in one call: cheaper than the streaming
		// hasher's calls for the small bodies of most API requests.
		b = append(b, q.body...)
		q.scratch = b
		q.fp = sha256.Sum256(b)
		return
	}
	q.scratch = b
	q.hasher.Reset()
	q.hasher.Write(b)
	q.hasher.Write(q.body)
	q.hasher.Sum(q.fp[:0])
}

// fingerprintCopyMax is the largest body fingerprint copies next to the other
// fields to hash them in one call; a larger one is streamed into the hasher.
const fingerprintCopyMax = 16 << 10

func appendField(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}
