package idemhttp

import (
	"encoding/binary"
	"errors"
)

// ErrNotStoredResponse is DecodeStored's error for bytes that are not a response
// the Middleware stored (another component's result, or a corrupted record).
var ErrNotStoredResponse = errors.New("idemhttp: not a stored response: " + errCorrupt.Error())

// StoredResponse is a response as the Middleware (and idem serve) stores it in a
// key's result, decoded by DecodeStored for operators' views: idem keys get, the
// admin API's GET /api/keys and the console.
type StoredResponse struct {
	// Status is the response's status code.
	Status int
	// Header holds the stored header fields in their stored order, a name given
	// once per value, as written: a hostile handler's names and values are not
	// checked here.
	Header []HeaderField
	// Body is the stored body, a subslice of the bytes decoded (nil when NotStored).
	Body []byte
	// NotStored is set for the marker of a response that was sent once but was too
	// large to store (Config.MaxBodyBytes, MaxStoredHeaderBytes): a retry with its key
	// is answered 409 instead of a replay. Size is then its size in bytes.
	NotStored bool
	Size      uint64
}

// HeaderField is one stored header value.
type HeaderField struct {
	Name, Value string
}

// Get returns the first value of the header name (canonical form, as stored), or "".
func (r StoredResponse) Get(name string) string {
	for _, f := range r.Header {
		if f.Name == name {
			return f.Value
		}
	}
	return ""
}

// DecodeStored decodes a key's stored result written by the Middleware: the
// response it replays (or the marker of one too large to store). Bytes of another
// format give ErrNotStoredResponse; DecodeStored never panics on any input, and
// reads the same framing a replay checks.
func DecodeStored(result []byte) (StoredResponse, error) {
	f, err := splitStored(result)
	if err != nil {
		return StoredResponse{}, ErrNotStoredResponse
	}
	if f.tooLarge {
		return StoredResponse{Status: f.status, NotStored: true, Size: f.count}, nil
	}
	r := StoredResponse{Status: f.status, Body: f.rest[f.end:], Size: uint64(len(f.rest) - f.end)}
	if f.count > 0 {
		r.Header = make([]HeaderField, 0, f.count)
	}
	next := func(at int) (string, int) {
		l, k := binary.Uvarint(f.rest[at:])
		return string(f.rest[at+k : at+k+int(l)]), at + k + int(l)
	}
	at := 0
	for range f.count {
		var hf HeaderField
		hf.Name, at = next(at)
		hf.Value, at = next(at)
		r.Header = append(r.Header, hf)
	}
	return r, nil
}
