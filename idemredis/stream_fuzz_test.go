package idemredis

import (
	"bytes"
	"errors"
	"maps"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/idemhq/idem"
)

// FuzzStreamEntry checks the mapping between idem messages and stream entries: a
// message the sink accepts comes back from the source unchanged (but for its
// idem.HeaderID header, which the id field replaces); fields from any producer
// never panic the source, and a missing or bad ID is an input error (which the
// inbox dead-letters), not a crash.
func FuzzStreamEntry(f *testing.F) {
	f.Add("order-1", "orders", "Trace-Id", "abc", []byte(`{"n":1}`), `{"a":"b"}`, true)
	f.Add("", "orders", idem.HeaderID, "from-header", []byte{}, `{"`+idem.HeaderID+`":"h"}`, false)
	f.Add("k", "s", "", "", []byte(nil), `{"a":1}`, true)
	f.Add("k", "s", "x", "y", []byte("p"), `null`, true)
	f.Add("k", "s", "x", "y", []byte("p"), `[`, false)
	f.Add("0", "0", "\x90", "", []byte(""), "0", true)
	f.Add("0", "0", "h", "\xff\xfe", []byte(""), "0", true)
	f.Fuzz(func(t *testing.T, id, stream, k, v string, payload []byte, headersField string, hasID bool) {
		m := idem.Message{ID: id, Topic: stream, Payload: payload, Headers: map[string]string{k: v}}
		if err := m.Validate(); err == nil {
			vals, err := entryValues(m)
			if errors.Is(err, idem.ErrInvalid) {
				return // refused, with a clear error
			}
			if err != nil {
				t.Fatalf("entryValues(%+v) = %v, want nil or an *idem.InputError", m, err)
			}
			// go-redis reads every field value back as a string.
			x := redis.XMessage{ID: "1-0", Values: map[string]any{}}
			for i := 0; i < len(vals); i += 2 {
				switch val := vals[i+1].(type) {
				case string:
					x.Values[vals[i].(string)] = val
				case []byte:
					x.Values[vals[i].(string)] = string(val)
				}
			}
			got, problem := decodeEntry(stream, x)
			want := maps.Clone(m.Headers)
			delete(want, idem.HeaderID)
			if len(want) == 0 {
				want = nil
			}
			if problem != "" || got.ID != m.ID || got.Topic != m.Topic || !bytes.Equal(got.Payload, m.Payload) && len(m.Payload) > 0 ||
				!maps.Equal(got.Headers, want) {
				t.Fatalf("round trip changed the message (%s):\n sent %+v\n  got %+v", problem, m, got)
			}
		} else if !errors.Is(err, idem.ErrInvalid) {
			t.Fatalf("Validate(%+v) = %v, want an *idem.InputError", m, err)
		}

		// Any fields another producer may write.
		x := redis.XMessage{ID: "1-0", Values: map[string]any{StreamFieldHeaders: headersField, StreamFieldPayload: string(payload)}}
		if hasID {
			x.Values[StreamFieldID] = id
		}
		got, _ := decodeEntry(stream, x)
		if hasID && got.ID != id {
			t.Fatalf("ID %q, want the id field %q", got.ID, id)
		}
		if _, ok := got.Headers[idem.HeaderID]; ok {
			t.Fatalf("the %s header was delivered as a header too: %+v", idem.HeaderID, got.Headers)
		}
		if err := got.Validate(); err != nil && !errors.Is(err, idem.ErrInvalid) {
			t.Fatalf("Validate = %v, want nil or an *idem.InputError", err)
		}
	})
}
