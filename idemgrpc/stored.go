package idemgrpc

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"google.golang.org/grpc/metadata"
)

// The stored form of a call's result, the bytes a Store keeps for its key:
//
//	0x01 status response header trailer    a result to replay
//	0x02 code size                          a result too large to store
//
// status is the google.rpc.Status of a failed call, marshaled (empty for OK);
// response is the response message, marshaled (empty for a failed call); header
// and trailer are metadata: a count of pairs, then each key and value. Every
// string and bytes field is prefixed by its length (uvarint), code and size are
// uvarints.
const (
	storedResult   byte = 0x01
	storedTooLarge byte = 0x02
)

// stored is a decoded result.
type stored struct {
	status   []byte // a marshaled google.rpc.Status; nil for OK
	response []byte
	header   metadata.MD
	trailer  metadata.MD
}

// errCorrupt is the error of bytes that are no stored result.
var errCorrupt = errors.New("idemgrpc: the stored result is corrupt")

// tooLarge is a decoded storedTooLarge marker.
type tooLarge struct {
	code uint32
	size int
}

func (e *tooLarge) Error() string {
	return fmt.Sprintf("idemgrpc: the result (code %d, %d bytes) was too large to store", e.code, e.size)
}

// encodeStored returns the stored form of a result, and false when it is larger
// than limit.
func encodeStored(st, resp []byte, header, trailer metadata.MD, limit int) ([]byte, bool) {
	n := 1 + uvarintLen(len(st)) + len(st) + uvarintLen(len(resp)) + len(resp) + mdLen(header) + mdLen(trailer)
	if n > limit {
		return nil, false
	}
	b := make([]byte, 0, n)
	b = append(b, storedResult)
	b = appendBytes(b, st)
	b = appendBytes(b, resp)
	b = appendMD(b, header)
	b = appendMD(b, trailer)
	return b, true
}

// encodeTooLarge returns the marker kept for a result of size bytes that could not
// be stored.
func encodeTooLarge(code uint32, size int) []byte {
	b := []byte{storedTooLarge}
	b = binary.AppendUvarint(b, uint64(code))
	return binary.AppendUvarint(b, uint64(size))
}

// decodeStored reads a stored result. It returns a *tooLarge for the marker and
// errCorrupt for anything else it cannot read; it never panics and allocates no
// more than len(b) worth of fields.
func decodeStored(b []byte) (stored, error) {
	if len(b) == 0 {
		return stored{}, errCorrupt
	}
	r := reader{b: b[1:]}
	switch b[0] {
	case storedTooLarge:
		code, size := r.uvarint(), r.uvarint()
		if r.bad || len(r.b) != 0 || code > 1<<31 || size > 1<<40 {
			return stored{}, errCorrupt
		}
		return stored{}, &tooLarge{code: uint32(code), size: int(size)}
	case storedResult:
		var s stored
		s.status = r.bytes()
		s.response = r.bytes()
		s.header = r.md()
		s.trailer = r.md()
		if r.bad || len(r.b) != 0 {
			return stored{}, errCorrupt
		}
		if len(s.status) == 0 {
			s.status = nil
		}
		return s, nil
	}
	return stored{}, errCorrupt
}

type reader struct {
	b   []byte
	bad bool
}

func (r *reader) uvarint() uint64 {
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.bad = true
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) bytes() []byte {
	n := r.uvarint()
	if r.bad || n > uint64(len(r.b)) {
		r.bad = true
		return nil
	}
	v := r.b[:n:n]
	r.b = r.b[n:]
	return v
}

func (r *reader) md() metadata.MD {
	pairs := r.uvarint()
	// Each pair takes at least two bytes: a count beyond that is a lie.
	if r.bad || pairs > uint64(len(r.b))/2 {
		r.bad = true
		return nil
	}
	if pairs == 0 {
		return nil
	}
	md := metadata.MD{}
	for range pairs {
		k, v := r.bytes(), r.bytes()
		if r.bad {
			return nil
		}
		md[string(k)] = append(md[string(k)], string(v))
	}
	return md
}

func appendBytes(b, v []byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(v)))
	return append(b, v...)
}

// appendMD appends md's pairs in key order, so equal metadata encodes equally.
func appendMD(b []byte, md metadata.MD) []byte {
	n := 0
	for _, vs := range md {
		n += len(vs)
	}
	b = binary.AppendUvarint(b, uint64(n))
	keys := make([]string, 0, len(md))
	for k := range md {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		for _, v := range md[k] {
			b = appendField(b, k)
			b = appendField(b, v)
		}
	}
	return b
}

func mdLen(md metadata.MD) int {
	n, pairs := 0, 0
	for k, vs := range md {
		for _, v := range vs {
			pairs++
			n += uvarintLen(len(k)) + len(k) + uvarintLen(len(v)) + len(v)
		}
	}
	return n + uvarintLen(pairs)
}

func uvarintLen(n int) int {
	l := 1
	for n >= 0x80 {
		n >>= 7
		l++
	}
	return l
}
