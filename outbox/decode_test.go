package outbox

import (
	"errors"
	"strings"
	"testing"

	"github.com/idemhq/idem"
)

func ptr[T any](v T) *T { return &v }

// goodRaw is a row as a claim reads it, decodable.
func goodRaw() rawRow {
	return rawRow{id: 7, attempts: 2, created: 1_700_000_000_000, part: 5,
		msgID: ptr("m1"), msgIDLen: 2, topic: ptr("orders"), topicLen: 6, key: ptr("k"), keyLen: 1,
		headers: ptr(`{"a":"b"}`), headersLen: 9, payload: ptr([]byte("body")), payloadLen: 4}
}

// Each bad value names its column, the row and a fix.
func TestDecodeRow(t *testing.T) {
	t.Parallel()
	raw := goodRaw()
	w := decodeRow(&raw, "")
	if w.bad != nil || w.id != 7 || w.attempts != 2 || w.created != 1_700_000_000_000 || w.msg.ID != "m1" ||
		w.msg.Topic != "orders" || w.msg.OrderingKey != "k" || w.msg.Headers["a"] != "b" || string(w.msg.Payload) != "body" {
		t.Fatalf("decodeRow(good) = %+v", w)
	}
	for _, c := range []struct {
		name   string
		change func(r *rawRow) string // returns rowscan's bad
		column string                 // "" when the row decodes
	}{
		{"no headers", func(r *rawRow) string { r.headers = ptr(""); return "" }, ""},
		{"null headers", func(r *rawRow) string { r.headers = ptr("null"); return "" }, ""},
		{"empty payload", func(r *rawRow) string { r.payload = ptr([]byte(nil)); return "" }, ""},
		{"headers not json", func(r *rawRow) string { r.headers = ptr("not json"); return "" }, "headers"},
		{"headers with a number", func(r *rawRow) string { r.headers = ptr(`{"n":1}`); return "" }, "headers"},
		{"headers an array", func(r *rawRow) string { r.headers = ptr(`["a"]`); return "" }, "headers"},
		{"headers too long", func(r *rawRow) string { r.headers, r.headersLen = nil, maxHeadersBytes+1; return "" }, "headers"},
		{"payload too long", func(r *rawRow) string { r.payload, r.payloadLen = nil, idem.MaxPayload+1; return "" }, "payload"},
		{"msg_id too long to read", func(r *rawRow) string { r.msgID, r.msgIDLen = nil, maxTextBytes+1; return "" }, "msg_id"},
		{"msg_id too long", func(r *rawRow) string { r.msgID = ptr(strings.Repeat("x", 256)); return "" }, "msg_id"},
		{"msg_id empty", func(r *rawRow) string { r.msgID = ptr(""); return "" }, "msg_id"},
		{"msg_id not utf-8", func(r *rawRow) string { r.msgID = ptr("\xff"); return "" }, "msg_id"},
		{"msg_id a control character", func(r *rawRow) string { r.msgID = ptr("a\x01"); return "" }, "msg_id"},
		{"topic empty", func(r *rawRow) string { r.topic = ptr(""); return "" }, "topic"},
		{"topic null", func(r *rawRow) string { r.topic, r.topicLen = nil, 0; return "" }, "topic"},
		{"part 64", func(r *rawRow) string { r.part = 64; return "" }, "part"},
		{"part negative", func(r *rawRow) string { r.part = -1; return "" }, "part"},
		{"created_at text", func(r *rawRow) string {
			r.created = 0
			return `created_at: converting driver.Value type string ("yesterday") to a int64: invalid syntax`
		}, "row"},
	} {
		raw := goodRaw()
		bad := c.change(&raw)
		w := decodeRow(&raw, bad)
		switch {
		case c.column == "" && w.bad != nil:
			t.Errorf("%s: %v, want the row decoded", c.name, w.bad)
		case c.column != "":
			var in *idem.InputError
			if !errors.As(w.bad, &in) || in.Field != c.column || in.Fix == "" || !strings.HasPrefix(w.bad.Error(), "outbox row 7: ") ||
				bad != "" && !strings.Contains(in.Reason, bad) {
				t.Errorf("%s: %v, want an input error on %s with a fix, naming row 7", c.name, w.bad, c.column)
			}
		}
	}
	raw = goodRaw()
	raw.headers = ptr("not json")
	if w := decodeRow(&raw, ""); w.msg.OrderingKey != "k" || w.attempts != 2 {
		t.Errorf("a bad row kept ordering key %q and attempts %d, want k and 2: it must hold its key back", w.msg.OrderingKey, w.attempts)
	}
}

// FuzzDecodeRow: whatever the columns hold, decodeRow does not panic, names the
// row when it refuses one, and a row it decodes is a valid message of a valid
// partition.
func FuzzDecodeRow(f *testing.F) {
	f.Add(int64(5), "m1", "orders", "k", `{"a":"b"}`, []byte("x"), false)
	f.Add(int64(-1), "", "", "", "not json", []byte(nil), true)
	f.Add(int64(64), "a\x01", "t", "\xff", `{"n":1}`, []byte{0xff}, false)
	f.Fuzz(func(t *testing.T, part int64, id, topic, key, headers string, payload []byte, tooLong bool) {
		r := rawRow{id: 7, part: part, msgID: &id, msgIDLen: int64(len(id)), topic: &topic, topicLen: int64(len(topic)),
			key: &key, keyLen: int64(len(key)), headers: &headers, headersLen: int64(len(headers)),
			payload: &payload, payloadLen: int64(len(payload))}
		if tooLong {
			r.headers, r.headersLen = nil, maxHeadersBytes+1
		}
		w := decodeRow(&r, "")
		if w.bad != nil {
			if !strings.HasPrefix(w.bad.Error(), "outbox row 7: ") {
				t.Fatalf("error %q does not name the row", w.bad)
			}
			return
		}
		if err := w.msg.Validate(); err != nil || part < 0 || part >= Partitions || tooLong {
			t.Fatalf("decoded a bad row: %v (part %d, too long %v)", err, part, tooLong)
		}
	})
}
