package idemgrpc

import (
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// The internals the fuzz targets of package idemgrpc_test drive.

// EncodeStored is encodeStored.
func EncodeStored(st, resp []byte, header, trailer metadata.MD, limit int) ([]byte, bool) {
	return encodeStored(st, resp, header, trailer, limit)
}

// EncodeTooLarge is encodeTooLarge.
func EncodeTooLarge(code uint32, size int) []byte { return encodeTooLarge(code, size) }

// DecodeStored is decodeStored, with the result spelled out; tooLarge is true,
// with code and size, for the marker of a result too large to store.
func DecodeStored(b []byte) (st, resp []byte, header, trailer metadata.MD, tooLargeCode uint32, tooLargeSize int, err error) {
	s, err := decodeStored(b)
	if tl, ok := err.(*tooLarge); ok {
		return nil, nil, nil, nil, tl.code, tl.size, err
	}
	return s.status, s.response, s.header, s.trailer, 0, 0, err
}

// IsTooLarge reports whether err is DecodeStored's error for the marker.
func IsTooLarge(err error) bool { _, ok := err.(*tooLarge); return ok }

// CallKey is callKey.
func CallKey(md metadata.MD, req any, field protoreflect.Name) (string, bool, error) {
	return callKey(md, req, field)
}
