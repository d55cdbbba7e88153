package idemhttp

import (
	"bytes"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
)

// A response the Middleware stored decodes to its status, headers and body; the
// marker of one too large to store decodes to NotStored; other bytes are refused.
func TestDecodeStored(t *testing.T) {
	h := http.Header{"Content-Type": {"application/json"}, "Link": {"<a>", "<b>"}}
	stored, ok := encodeResponse(201, h, []string{"Content-Type", "Link"}, []byte(`{"id":1}`))
	if !ok {
		t.Fatal("not encoded")
	}
	r, err := DecodeStored(stored)
	if err != nil {
		t.Fatal(err)
	}
	want := []HeaderField{{"Content-Type", "application/json"}, {"Link", "<a>"}, {"Link", "<b>"}}
	if r.Status != 201 || !slices.Equal(r.Header, want) || string(r.Body) != `{"id":1}` || r.NotStored || r.Size != 8 {
		t.Fatalf("decoded %+v", r)
	}
	if r.Get("Content-Type") != "application/json" || r.Get("X-None") != "" {
		t.Fatalf("Get: %q", r.Get("Content-Type"))
	}

	r, err = DecodeStored(encodeTooLarge(200, 5<<20))
	if err != nil || !r.NotStored || r.Status != 200 || r.Size != 5<<20 || r.Body != nil {
		t.Fatalf("too large: %+v %v", r, err)
	}

	for _, b := range [][]byte{nil, []byte("ok"), []byte(`{"status":"paid"}`), {encodingV1, 0, 99, 0}, {encodingV1, 0, 200, 3, 1, 'a'}} {
		if _, err := DecodeStored(b); !errors.Is(err, ErrNotStoredResponse) {
			t.Errorf("DecodeStored(%q): %v, want ErrNotStoredResponse", b, err)
		}
	}
}

// FuzzDecodeStored: any bytes decode or give ErrNotStoredResponse, never a panic;
// DecodeStored accepts exactly what a replay accepts, and what it decodes encodes
// back to the same bytes.
func FuzzDecodeStored(f *testing.F) {
	h := http.Header{"Content-Type": {"text/html"}, "X-Evil": {"<script>alert(1)</script>\x00\xff"}}
	good, _ := encodeResponse(200, h, []string{"Content-Type", "X-Evil"}, []byte("<img src=x onerror=alert(1)>\x00\xfe"))
	f.Add(good)
	f.Add(encodeTooLarge(503, 1<<40))
	f.Add([]byte{encodingV1, 0, 200, 0})
	f.Add([]byte{encodingV1, 0, 200, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01})
	f.Add([]byte{encodingV1, 0xff, 0xff, 1, 5, 'a'})
	f.Add([]byte(strings.Repeat("x", 70)))
	f.Fuzz(func(t *testing.T, stored []byte) {
		r, err := DecodeStored(stored)
		replayErr := replayResponse(httptest.NewRecorder(), stored, nil)
		var tl *errTooLarge
		if (err == nil) != (replayErr == nil || errors.As(replayErr, &tl)) {
			t.Fatalf("DecodeStored: %v, replay: %v", err, replayErr)
		}
		if err != nil {
			if !errors.Is(err, ErrNotStoredResponse) {
				t.Fatalf("error %v, want ErrNotStoredResponse", err)
			}
			return
		}
		if r.Status < 200 || r.Status > 999 {
			t.Fatalf("status %d", r.Status)
		}
		if r.NotStored {
			if r.Size > 1<<62 {
				return // beyond int64
			}
			// A hostile store may write the size's uvarint non-minimally: compare decoded.
			r2, err := DecodeStored(encodeTooLarge(r.Status, int64(r.Size)))
			if err != nil || !r2.NotStored || r2.Status != r.Status || r2.Size != r.Size {
				t.Fatalf("marker %+v re-encoded decodes to %+v, %v", r, r2, err)
			}
			return
		}
		// Encode the fields back, in their order.
		hdr, names := http.Header{}, []string{}
		for _, f := range r.Header {
			if _, ok := hdr[f.Name]; !ok {
				names = append(names, f.Name)
			}
			hdr[f.Name] = append(hdr[f.Name], f.Value)
		}
		again, ok := encodeResponse(r.Status, hdr, names, r.Body)
		if !ok {
			return // more header bytes than a fresh response may store
		}
		if grouped(r.Header) && !bytes.Equal(again, stored) {
			// Uvarints may be written non-minimally by a hostile store: compare the
			// decoded form instead.
			r2, err := DecodeStored(again)
			if err != nil || r2.Status != r.Status || !slices.Equal(r2.Header, r.Header) || !bytes.Equal(r2.Body, r.Body) {
				t.Fatalf("%+v re-encoded decodes to %+v, %v", r, r2, err)
			}
		}
	})
}

// grouped reports whether the values of each name are adjacent (as the Middleware
// stores them), so that encoding by name keeps their order.
func grouped(fs []HeaderField) bool {
	seen := map[string]bool{}
	for i, f := range fs {
		if i > 0 && fs[i-1].Name == f.Name {
			continue
		}
		if seen[f.Name] {
			return false
		}
		seen[f.Name] = true
	}
	return true
}
