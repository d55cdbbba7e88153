package idemgrpc_test

import (
	"bytes"
	"context"
	"encoding/hex"
	"reflect"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/idemhq/idem/idemgrpc"
	"github.com/idemhq/idem/internal/orderspb"
)

// FuzzDecodeStored: any bytes a store hands back decode without panicking, and
// what decodes encodes again to bytes that decode equal.
func FuzzDecodeStored(f *testing.F) {
	ok, _ := idemgrpc.EncodeStored([]byte("status"), nil, metadata.Pairs("x-a", "1", "x-a", "2"), metadata.Pairs("t", ""), 1<<20)
	resp, _ := idemgrpc.EncodeStored(nil, []byte{0x0a, 0x01, 'x'}, nil, nil, 1<<20)
	for _, seed := range [][]byte{ok, resp, idemgrpc.EncodeTooLarge(13, 2<<20), nil, {0x01}, {0x02, 0xff}, {0x01, 0, 0, 0x7f}, {0x03}} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		st, resp, header, trailer, code, size, err := idemgrpc.DecodeStored(b)
		switch {
		case idemgrpc.IsTooLarge(err):
			b2 := idemgrpc.EncodeTooLarge(code, size)
			if _, _, _, _, code2, size2, err2 := idemgrpc.DecodeStored(b2); !idemgrpc.IsTooLarge(err2) || code2 != code || size2 != size {
				t.Fatalf("marker (%d, %d) re-decoded as (%d, %d, %v)", code, size, code2, size2, err2)
			}
		case err != nil:
			if st != nil || resp != nil || header != nil || trailer != nil {
				t.Fatal("a corrupt record decoded to fields")
			}
		default:
			if len(st)+len(resp) > len(b) {
				t.Fatalf("decoded %d bytes out of %d", len(st)+len(resp), len(b))
			}
			b2, ok := idemgrpc.EncodeStored(st, resp, header, trailer, len(b))
			if !ok || len(b2) > len(b) {
				t.Fatalf("re-encoded to %d bytes (ok=%v), from %d", len(b2), ok, len(b))
			}
			st2, resp2, header2, trailer2, _, _, err := idemgrpc.DecodeStored(b2)
			if err != nil || !bytes.Equal(st, st2) || !bytes.Equal(resp, resp2) || !reflect.DeepEqual(header, header2) || !reflect.DeepEqual(trailer, trailer2) {
				t.Fatalf("round trip changed the record: %v", err)
			}
		}
	})
}

// FuzzEncodeStored: a result encodes within its limit exactly when it fits, and
// decodes to what was encoded.
func FuzzEncodeStored(f *testing.F) {
	f.Add([]byte("st"), []byte("resp"), "x-h", "v", "x-t", "w", 64)
	f.Add([]byte(nil), []byte(nil), "", "", "", "", 1)
	f.Fuzz(func(t *testing.T, st, resp []byte, hk, hv, tk, tv string, limit int) {
		header, trailer := metadata.MD{hk: {hv, hv}}, metadata.MD{tk: {tv}}
		whole, ok := idemgrpc.EncodeStored(st, resp, header, trailer, 1<<30)
		if !ok {
			t.Fatal("refused under a 1 GiB limit")
		}
		if b, ok := idemgrpc.EncodeStored(st, resp, header, trailer, limit); ok != (len(whole) <= limit) || (ok && !bytes.Equal(b, whole)) {
			t.Fatalf("limit %d, size %d: ok=%v", limit, len(whole), ok)
		}
		st2, resp2, header2, trailer2, _, _, err := idemgrpc.DecodeStored(whole)
		if len(st) == 0 {
			st = nil
		}
		if err != nil || !bytes.Equal(st, st2) || !bytes.Equal(resp, resp2) || !reflect.DeepEqual(header, header2) || !reflect.DeepEqual(trailer, trailer2) {
			t.Fatalf("decoded %q %q %v %v (%v)", st2, resp2, header2, trailer2, err)
		}
	})
}

// FuzzCallKey: whatever the metadata and the request field carry, callKey does
// not panic; a key it accepts is 1 to 255 bytes of printable ASCII and is the one
// sent; two metadata values, or a field that disagrees with the metadata, are
// refused InvalidArgument.
func FuzzCallKey(f *testing.F) {
	f.Add("k-1", "k-2", uint8(1), "", true)
	f.Add("k-1", "k-2", uint8(2), "", false)
	f.Add("k-1", "", uint8(1), "k-2", true)
	f.Add("", "", uint8(0), "rid", true)
	f.Add(" k", "", uint8(1), "", false)
	f.Add("k\x7f", "", uint8(0), "k\x7f", true)
	f.Add(strings.Repeat("k", 256), "", uint8(1), "", false)
	f.Fuzz(func(t *testing.T, v1, v2 string, n uint8, field string, useField bool) {
		n %= 3
		md := metadata.MD{}
		switch n {
		case 1:
			md[idemgrpc.MetadataKey] = []string{v1}
		case 2:
			md[idemgrpc.MetadataKey] = []string{v1, v2}
		}
		name := ""
		if useField {
			name = "request_id"
		}
		key, found, err := idemgrpc.CallKey(md, &orderspb.PlaceOrderRequest{RequestId: field}, protoreflect.Name(name))
		if err != nil {
			if status.Code(err) != codes.InvalidArgument || idemgrpc.Reason(err) != idemgrpc.ReasonInvalidKey {
				t.Fatalf("refused with %v", err)
			}
			if key != "" || found {
				t.Fatalf("refused, but key %q found=%v", key, found)
			}
			return
		}
		switch {
		case n == 2:
			t.Fatal("two metadata values accepted")
		case n == 1 && useField && field != "" && field != v1:
			t.Fatalf("metadata %q and field %q accepted", v1, field)
		case !found:
			if n != 0 || (useField && field != "") {
				t.Fatal("a key sent was not found")
			}
			return
		case n == 1 && key != v1, n == 0 && key != field:
			t.Fatalf("key %q is not the one sent", key)
		}
		if len(key) < 1 || len(key) > 255 {
			t.Fatalf("accepted a key of %d bytes", len(key))
		}
		for i := range len(key) {
			if key[i] < 0x20 || key[i] > 0x7e {
				t.Fatalf("accepted byte %#x", key[i])
			}
		}
	})
}

// FuzzCredentialScope: the scope of a caller is deterministic, anonymous exactly
// when no credential is sent, never holds a credential in clear, and two
// different sets of credentials (length-prefixed, so no value's bytes can
// spill into the next) never share a scope.
func FuzzCredentialScope(f *testing.F) {
	f.Add("Bearer a", "", "Bearer a", "")
	f.Add("ab", "", "a", "b")
	f.Add("", "k", "k", "")
	f.Add("", "", "", "")
	scope := idemgrpc.CredentialScope("authorization", "x-api-key")
	of := func(t *testing.T, auth, apiKey string) string {
		md := metadata.MD{}
		if auth != "" {
			md["authorization"] = []string{auth}
		}
		if apiKey != "" {
			md["x-api-key"] = []string{apiKey}
		}
		s, err := scope(metadata.NewIncomingContext(context.Background(), md))
		if err != nil {
			t.Fatal(err)
		}
		if s2, _ := scope(metadata.NewIncomingContext(context.Background(), md.Copy())); s2 != s {
			t.Fatalf("scope %q, then %q", s, s2)
		}
		return s
	}
	f.Fuzz(func(t *testing.T, a1, k1, a2, k2 string) {
		s1, s2 := of(t, a1, k1), of(t, a2, k2)
		if (s1 == "anonymous") != (a1 == "" && k1 == "") {
			t.Fatalf("scope %q of %q, %q", s1, a1, k1)
		}
		if s1 != "anonymous" {
			digits, ok := strings.CutPrefix(s1, "cred:")
			if _, err := hex.DecodeString(digits); !ok || err != nil || len(digits) != 32 {
				t.Fatalf("scope %q: want cred: and 32 hex digits", s1)
			}
		}
		if (s1 == s2) != (a1 == a2 && k1 == k2) {
			t.Fatalf("(%q, %q) → %q, (%q, %q) → %q", a1, k1, s1, a2, k2, s2)
		}
	})
}
