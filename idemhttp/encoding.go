package idemhttp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
)

// The stored form of a response (Store result bytes):
//
//	version byte (1) | status uint16 big endian | uvarint header count |
//	per header value: uvarint len, name, uvarint len, value | body (the rest)
//
// or, for a response that was sent but is too large to store (a marker that keeps
// the key so a retry does not run the request again):
//
//	version byte (2) | status uint16 big endian | uvarint size in bytes
//
// Binary, not JSON: a replay decodes it without escaping or base64, and the body is
// stored as is.
const (
	encodingV1       = 1
	encodingTooLarge = 2
)

// MaxStoredHeaderBytes bounds the response headers stored with a response (names
// and values, with their length prefixes), beside Config.MaxBodyBytes for the body:
// a stored response is at most MaxBodyBytes + MaxStoredHeaderBytes + 8 bytes. A
// response whose stored headers are larger is treated like one whose body is too
// large.
const MaxStoredHeaderBytes = 64 << 10

var errCorrupt = errors.New("stored response is corrupt or from an unknown version")

// deniedHeader reports whether a response header is never stored when
// Config.ReplayHeaders is nil (store every header but these):
//
//   - hop-by-hop fields (RFC 9110 §7.6.1): Connection, Keep-Alive,
//     Proxy-Connection, TE, Trailer, Transfer-Encoding, Upgrade, and every field
//     the Connection header names (checked by the caller);
//   - fields about this connection or this message, not the result:
//     Content-Length (recomputed from the stored body), Date (set fresh by
//     net/http), Alt-Svc (an alternative service advertisement of the moment),
//     Proxy-Authenticate;
//   - Set-Cookie: a session or CSRF cookie minted for the first attempt must not be
//     handed out again to whoever replays the key;
//   - Strict-Transport-Security: a transport policy the edge sets on every
//     response, not part of the result;
//   - Idempotent-Replayed, which the replay sets itself.
func deniedHeader(name string) bool {
	switch name {
	case "Connection", "Keep-Alive", "Proxy-Connection", "Te", "Trailer", "Transfer-Encoding", "Upgrade",
		"Content-Length", "Date", "Alt-Svc", "Proxy-Authenticate", "Set-Cookie", "Strict-Transport-Security",
		HeaderReplayed:
		return true
	}
	return false
}

// unstorable reports whether a header can never be stored, even when
// Config.ReplayHeaders lists it: it describes the connection or the framing of
// the first response, not its result.
func unstorable(name string) bool {
	switch name {
	case "Connection", "Keep-Alive", "Proxy-Connection", "Te", "Trailer", "Transfer-Encoding", "Upgrade",
		"Content-Length", HeaderReplayed:
		return true
	}
	return false
}

// preHeader is a response header set before the handler ran.
type preHeader struct {
	name string
	vs   []string
}

// snapshotHeader records the response headers present before the handler runs.
func (q *mwRequest) snapshotHeader(h http.Header) {
	for name, vs := range h {
		q.pre = append(q.pre, preHeader{name, vs})
	}
}

// setBefore reports whether h[name] is still the value set before the handler ran:
// the same slice (Header.Set replaces it; Header.Add grows it).
func (q *mwRequest) setBefore(name string, vs []string) bool {
	for _, p := range q.pre {
		if p.name == name {
			return len(p.vs) == len(vs) && (len(vs) == 0 || &p.vs[0] == &vs[0])
		}
	}
	return false
}

// storedNames fills q.names with the response headers to store: the allow-list's
// when Config.ReplayHeaders is set, else every header but the denied ones, and in
// both cases none set by outer middleware before the handler and left unchanged.
func (c *mwCore) storedNames(q *mwRequest, h http.Header) {
	q.names = q.names[:0]
	if c.allow != nil {
		for _, name := range c.allow {
			if vs := h[name]; len(vs) > 0 && !q.setBefore(name, vs) {
				q.names = append(q.names, name)
			}
		}
		return
	}
	conn := h["Connection"]
	for name, vs := range h {
		if len(vs) == 0 || deniedHeader(name) || q.setBefore(name, vs) || (len(conn) > 0 && namedIn(conn, name)) {
			continue
		}
		q.names = append(q.names, name)
	}
	// In name order, not the map's: a response is stored the same way each time,
	// and what shows it (idem keys get, the console: the first headers only) shows
	// the same headers.
	slices.Sort(q.names)
}

// namedIn reports whether name is one of the comma-separated tokens of the
// Connection header values conn.
func namedIn(conn []string, name string) bool {
	for _, v := range conn {
		for tok := range strings.SplitSeq(v, ",") {
			if strings.EqualFold(strings.TrimSpace(tok), name) {
				return true
			}
		}
	}
	return false
}

// encodeResponse returns the stored form of a response in a new slice of its exact
// size (the store may keep it), with the headers names of h; ok is false when the
// headers exceed MaxStoredHeaderBytes.
func encodeResponse(status int, h http.Header, names []string, body []byte) (stored []byte, ok bool) {
	n, size := 0, 0
	for _, name := range names {
		for _, v := range h[name] {
			n++
			size += uvarintLen(len(name)) + len(name) + uvarintLen(len(v)) + len(v)
		}
	}
	if size > MaxStoredHeaderBytes {
		return nil, false
	}
	dst := make([]byte, 0, 3+uvarintLen(n)+size+len(body))
	dst = append(dst, encodingV1, byte(status>>8), byte(status))
	dst = binary.AppendUvarint(dst, uint64(n))
	for _, name := range names {
		for _, v := range h[name] {
			dst = binary.AppendUvarint(dst, uint64(len(name)))
			dst = append(dst, name...)
			dst = binary.AppendUvarint(dst, uint64(len(v)))
			dst = append(dst, v...)
		}
	}
	return append(dst, body...), true
}

// encodeTooLarge returns the marker stored for a response of status and size
// bytes that was sent but could not be stored.
func encodeTooLarge(status int, size int64) []byte {
	return binary.AppendUvarint([]byte{encodingTooLarge, byte(status >> 8), byte(status)}, uint64(max(size, 0)))
}

func uvarintLen(n int) int {
	l := 1
	for ; n >= 0x80; n >>= 7 {
		l++
	}
	return l
}

// errTooLarge is replayResponse's error for a stored marker: the response was sent
// once and is not stored.
type errTooLarge struct {
	status int
	size   uint64
}

func (e *errTooLarge) Error() string {
	return fmt.Sprintf("the response (status %d, %d bytes) was too large to store for replay", e.status, e.size)
}

// replayResponse writes a stored response with Idempotent-Replayed: true. With
// allow (canonical names), headers no longer in it are dropped: a header is replayed
// only while it is allowed; without, every stored header is replayed but those
// deniedHeader names. Values are substrings of one string, so a replay allocates a
// fixed handful of objects whatever its header count. A stored marker of a response
// too large to store gives an *errTooLarge and writes nothing.
func replayResponse(w http.ResponseWriter, stored []byte, allow []string) error {
	f, err := splitStored(stored)
	if err != nil {
		return err
	}
	status, count, rest, end := f.status, f.count, f.rest, f.end
	if f.tooLarge {
		return &errTooLarge{status: status, size: count}
	}
	section, body := string(rest[:end]), rest[end:]
	n := int(count)
	vals := make([]string, n+2)
	h := w.Header()
	next := func(at int) (string, int) { // the field at offset at, and the offset after it
		l, k := binary.Uvarint(rest[at:])
		return section[at+k : at+k+int(l)], at + k + int(l)
	}
	at, first, prev := 0, 0, ""
	for i := range n {
		var name string
		name, at = next(at)
		vals[i], at = next(at)
		if name != prev {
			first, prev = i, name
		}
		if allow == nil {
			if !deniedHeader(name) && name != "" {
				h[name] = vals[first : i+1 : i+1]
			}
			continue
		}
		for _, a := range allow {
			if a == name {
				// Values of one name are stored together: one subslice holds them all.
				h[a] = vals[first : i+1 : i+1]
				break
			}
		}
	}
	vals[n] = "true"
	h[HeaderReplayed] = vals[n : n+1 : n+1]
	if _, ok := h["Content-Type"]; !ok && len(body) > 0 {
		h["Content-Type"] = nil // replay as stored: no sniffed type the original lacked
	}
	if bodyAllowed(status) && len(body) > chunkingSize {
		vals[n+1] = strconv.Itoa(len(body))
		h["Content-Length"] = vals[n+1 : n+2 : n+2]
	}
	w.WriteHeader(status)
	if len(body) > 0 && bodyAllowed(status) {
		_, _ = w.Write(body)
	}
	return nil
}

// storedFrame is the framing of a stored response, checked by splitStored.
type storedFrame struct {
	status   int
	tooLarge bool
	// count is the number of header values (v1) or the size of the response that
	// was not stored (tooLarge).
	count uint64
	// rest is what follows the count: count name/value pairs in rest[:end], then the
	// body in rest[end:].
	rest []byte
	end  int
}

// splitStored checks the framing of a stored response: its version, its status
// and that every length prefix stays within the bytes. It allocates nothing.
func splitStored(stored []byte) (storedFrame, error) {
	if len(stored) < 4 || (stored[0] != encodingV1 && stored[0] != encodingTooLarge) {
		return storedFrame{}, errCorrupt
	}
	f := storedFrame{status: int(binary.BigEndian.Uint16(stored[1:3]))}
	count, k := binary.Uvarint(stored[3:])
	if k <= 0 || f.status < 200 || f.status > 999 {
		return storedFrame{}, errCorrupt
	}
	f.count = count
	if stored[0] == encodingTooLarge {
		if 3+k != len(stored) {
			return storedFrame{}, errCorrupt
		}
		f.tooLarge = true
		return f, nil
	}
	if count > uint64(len(stored)) {
		return storedFrame{}, errCorrupt
	}
	f.rest = stored[3+k:]
	// Find where the headers end.
	for range count * 2 {
		l, k := binary.Uvarint(f.rest[f.end:])
		if k <= 0 || l > uint64(len(f.rest)-f.end-k) {
			return storedFrame{}, errCorrupt
		}
		f.end += k + int(l)
	}
	return f, nil
}
