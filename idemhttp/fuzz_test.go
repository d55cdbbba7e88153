package idemhttp

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"testing"
)

// FuzzReplayResponse decodes arbitrary stored bytes (a store is outside the
// process: a corrupted or hostile record must give errCorrupt, never a panic or an
// out-of-range slice), and checks that what encodeResponse writes decodes back.
func FuzzReplayResponse(f *testing.F) {
	h := http.Header{"Content-Type": {"application/json"}, "X-Order-Id": {"1"}, "Link": {"<a>", "<b>"}}
	names := []string{"Content-Type", "Link", "X-Order-Id"}
	good, _ := encodeResponse(201, h, names, []byte(`{"id":1}`))
	f.Add(good, false)
	f.Add(good, true)
	f.Add(encodeTooLarge(200, 5<<20), false)
	f.Add([]byte{encodingV1, 0, 200, 0}, false)
	f.Add([]byte{encodingV1, 0, 200, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01}, false)
	f.Add([]byte{encodingV1, 0xff, 0xff, 1, 5, 'a'}, true)
	f.Add([]byte{encodingTooLarge, 1, 0xf4}, false)
	f.Add([]byte{}, false)
	f.Fuzz(func(t *testing.T, stored []byte, withAllow bool) {
		var allow []string
		if withAllow {
			allow = names
		}
		w := httptest.NewRecorder()
		err := replayResponse(w, stored, allow)
		if err != nil {
			return
		}
		if w.Code < 200 || w.Code > 999 || w.Header().Get(HeaderReplayed) != "true" {
			t.Fatalf("replayed status %d, Idempotent-Replayed %q", w.Code, w.Header().Get(HeaderReplayed))
		}
		for name := range w.Header() {
			if deniedHeader(name) && name != HeaderReplayed && name != "Content-Length" {
				t.Fatalf("replayed the denied header %s", name)
			}
		}
		// What was replayed encodes to a record that replays the same.
		hdr := w.Header().Clone()
		delete(hdr, HeaderReplayed)
		delete(hdr, "Content-Length")
		var keep []string
		for name, vs := range hdr {
			if len(vs) > 0 {
				keep = append(keep, name)
			}
		}
		slices.Sort(keep)
		again, ok := encodeResponse(w.Code, hdr, keep, w.Body.Bytes())
		if !ok {
			return // more header bytes than a fresh response may store
		}
		w2 := httptest.NewRecorder()
		if err := replayResponse(w2, again, nil); err != nil {
			t.Fatalf("re-encoded record does not decode: %v", err)
		}
		if w2.Code != w.Code || !bytes.Equal(w2.Body.Bytes(), w.Body.Bytes()) {
			t.Fatalf("round trip: %d %q, then %d %q", w.Code, w.Body.Bytes(), w2.Code, w2.Body.Bytes())
		}
	})
}

// FuzzFingerprint checks that the fingerprint is a function of the request's
// fields (deterministic, body read through the pooled buffer) and that moving
// bytes from one field to the next changes it: the length prefixes make the
// encoding injective.
func FuzzFingerprint(f *testing.F) {
	f.Add("POST", "/orders", "a=1", []byte(`{"qty":1}`), "acct", uint8(3))
	f.Add("PATCH", "/", "", []byte{}, "", uint8(0))
	f.Add("POST", "/a%2Fb", "x=%zz", bytes.Repeat([]byte{0}, fingerprintCopyMax+1), "v\x00", uint8(255))
	f.Fuzz(func(t *testing.T, method, path, query string, body []byte, header string, cut uint8) {
		u := &url.URL{Path: path, RawQuery: query}
		fp := func(method string, u *url.URL, body []byte, header string) [32]byte {
			r := &http.Request{Method: method, URL: u, Header: http.Header{"X-Account": {header}}}
			q := getMWRequest()
			defer putMWRequest(q)
			q.body = append(q.body[:0], body...)
			q.fingerprint(r, []string{"X-Account"})
			return q.fp
		}
		a := fp(method, u, body, header)
		if b := fp(method, u, body, header); a != b {
			t.Fatalf("fingerprint not deterministic")
		}
		// Move the end of the method to the front of the path: another request.
		if m := method; len(m) > 0 {
			n := int(cut) % len(m)
			moved := &url.URL{Path: m[n:] + u.Path, RawQuery: u.RawQuery}
			if moved.EscapedPath() != u.EscapedPath() || m[:n] != m {
				if fp(m[:n], moved, body, header) == a {
					t.Fatalf("moving %q from the method to the path keeps the fingerprint", m[n:])
				}
			}
		}
		// Move the end of the header value into the body.
		if len(header) > 0 {
			n := int(cut) % len(header)
			if fp(method, u, append([]byte(header[n:]), body...), header[:n]) == a {
				t.Fatalf("moving %q from the header to the body keeps the fingerprint", header[n:])
			}
		}
	})
}
