package idemhttp

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// FuzzJSONKey: jsonKey never panics, accepts only one valid JSON object, and finds
// the key encoding/json reads from the same body.
func FuzzJSONKey(f *testing.F) {
	for _, s := range []string{`{"id":"evt_1"}`, `{"id":1.5e3}`, `{"a":{"id":"x"},"id":"y"}`, `{"id":"a","ID":"b"}`,
		`{"id":"\u0041"}`, `[]`, `{"id":"a"} x`, ``, ` `, `{"id":[1]}`, `{"x":1`, `{"id":"a",}`} {
		f.Add([]byte(s), "id")
	}
	f.Fuzz(func(t *testing.T, body []byte, field string) {
		key, found, err := jsonKey(body, field)
		if err != nil {
			if found || key != "" {
				t.Fatalf("error %v with key %q found %v", err, key, found)
			}
			return
		}
		if len(bytes.TrimSpace(body)) == 0 {
			if found {
				t.Fatalf("found %q in an empty body", key)
			}
			return
		}
		var m map[string]any
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.UseNumber()
		if err := dec.Decode(&m); err != nil || m == nil || dec.More() {
			t.Fatalf("accepted %q, which is not one JSON object (%v)", body, err)
		}
		v, ok := m[field]
		if ok != found {
			t.Fatalf("%q: found %v, encoding/json finds the field: %v", body, found, ok)
		}
		if !found {
			for k := range m {
				if strings.EqualFold(k, field) {
					t.Fatalf("%q: a case variant %q of %q passed as no key", body, k, field)
				}
			}
			return
		}
		switch v := v.(type) {
		case string:
			if v != key {
				t.Fatalf("%q: key %q, encoding/json reads %q", body, key, v)
			}
		case json.Number:
			if v.String() != key {
				t.Fatalf("%q: key %q, encoding/json reads %q", body, key, v)
			}
		default:
			t.Fatalf("%q: key %q from a %T", body, key, v)
		}
	})
}
