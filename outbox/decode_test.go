package outbox

import (
	"errors"
	"strings"
	"testing"

	"github.com/idemhq/idem"
)

// goodRaw is a row as a driver returns it, decodable.
func goodRaw() rawRow {
	return rawRow{id: 7, attempts: int32(2), created: int64(1_700_000_000_000), part: int32(5),
		msgID: "m1", msgIDLen: int32(2), topic: "orders", topicLen: int32(6), key: "k", keyLen: int32(1),
		headers: `{"a":"b"}`, headersLen: int32(9), payload: []byte("body"), payloadLen: int32(4)}
}

// Each driver's types decode, and each bad value names its column.
func TestDecodeRow(t *testing.T) {
	t.Parallel()
	w := decodeRow(ptr(goodRaw()))
	if w.bad != nil || w.id != 7 || w.attempts != 2 || w.created != 1_700_000_000_000 || w.msg.ID != "m1" ||
		w.msg.Topic != "orders" || w.msg.OrderingKey != "k" || w.msg.Headers["a"] != "b" || string(w.msg.Payload) != "body" {
		t.Fatalf("decodeRow(good) = %+v", w)
	}
	for _, c := range []struct {
		name   string
		change func(r *rawRow)
		column string // "" when the row decodes
	}{
		{"mysql text protocol", func(r *rawRow) {
			r.attempts, r.created, r.part, r.msgID, r.topic = []byte("2"), []byte("1700000000000"), []byte("5"), []byte("m1"), []byte("orders")
		}, ""},
		{"sqlite real time", func(r *rawRow) { r.created = 1.7e12 }, ""},
		{"no headers", func(r *rawRow) { r.headers = "" }, ""},
		{"null headers", func(r *rawRow) { r.headers = "null" }, ""},
		{"empty payload", func(r *rawRow) { r.payload = []byte(nil) }, ""},
		{"headers not json", func(r *rawRow) { r.headers = "not json" }, "headers"},
		{"headers with a number", func(r *rawRow) { r.headers = `{"n":1}` }, "headers"},
		{"headers an array", func(r *rawRow) { r.headers = `["a"]` }, "headers"},
		{"headers too long", func(r *rawRow) { r.headers, r.headersLen = nil, int64(maxHeadersBytes+1) }, "headers"},
		{"payload too long", func(r *rawRow) { r.payload, r.payloadLen = nil, int64(idem.MaxPayload+1) }, "payload"},
		{"msg_id too long to read", func(r *rawRow) { r.msgID, r.msgIDLen = nil, int64(maxTextBytes+1) }, "msg_id"},
		{"msg_id too long", func(r *rawRow) { r.msgID = strings.Repeat("x", 256) }, "msg_id"},
		{"msg_id empty", func(r *rawRow) { r.msgID = "" }, "msg_id"},
		{"msg_id not utf-8", func(r *rawRow) { r.msgID = []byte{0xff} }, "msg_id"},
		{"topic empty", func(r *rawRow) { r.topic = "" }, "topic"},
		{"topic null", func(r *rawRow) { r.topic, r.topicLen = nil, nil }, "topic"},
		{"part 64", func(r *rawRow) { r.part = int64(64) }, "part"},
		{"part negative", func(r *rawRow) { r.part = int32(-1) }, "part"},
		{"part text", func(r *rawRow) { r.part = "p" }, "part"},
		{"created_at text", func(r *rawRow) { r.created = "yesterday" }, "created_at"},
		{"created_at fraction", func(r *rawRow) { r.created = 1.5 }, "created_at"},
		{"attempts null", func(r *rawRow) { r.attempts = nil }, "attempts"},
		{"ordering key of a bool", func(r *rawRow) { r.key = true }, "ordering_key"},
	} {
		raw := goodRaw()
		c.change(&raw)
		w := decodeRow(&raw)
		switch {
		case c.column == "" && w.bad != nil:
			t.Errorf("%s: %v, want the row decoded", c.name, w.bad)
		case c.column != "":
			var in *idem.InputError
			if !errors.As(w.bad, &in) || in.Field != c.column || in.Fix == "" || !strings.HasPrefix(w.bad.Error(), "outbox row 7: ") {
				t.Errorf("%s: %v, want an input error on %s with a fix, naming row 7", c.name, w.bad, c.column)
			}
		}
	}
	raw := goodRaw()
	raw.headers = "not json"
	if w := decodeRow(&raw); w.msg.OrderingKey != "k" || w.attempts != 2 {
		t.Errorf("a bad row kept ordering key %q and attempts %d, want k and 2: it must hold its key back", w.msg.OrderingKey, w.attempts)
	}
}

func ptr[T any](v T) *T { return &v }

// FuzzDecodeRow: whatever the columns hold, decodeRow does not panic, and a row it
// decodes is a valid message of a valid partition.
func FuzzDecodeRow(f *testing.F) {
	f.Add(uint8(0), int64(5), "m1", "orders", `{"a":"b"}`, []byte("x"))
	f.Add(uint8(1), int64(-1), "", "", "not json", []byte(nil))
	f.Add(uint8(2), int64(64), "a\x01", "t", `{"n":1}`, []byte{0xff})
	f.Fuzz(func(t *testing.T, kind uint8, n int64, id, topic, headers string, b []byte) {
		raw := goodRaw()
		vals := []any{n, int32(n), float64(n) / 3, []byte(id), id, nil, b}
		pick := func(i int) any { return vals[(int(kind)+i)%len(vals)] }
		raw.attempts, raw.created, raw.part = pick(0), pick(1), pick(2)
		raw.msgID, raw.topic, raw.headers, raw.payload = id, topic, headers, b
		if kind%5 == 0 {
			raw.key, raw.headers = pick(3), pick(4)
		}
		w := decodeRow(&raw)
		if w.bad != nil {
			if !strings.HasPrefix(w.bad.Error(), "outbox row 7: ") {
				t.Fatalf("error %q does not name the row", w.bad)
			}
			return
		}
		if err := w.msg.Validate(); err != nil {
			t.Fatalf("decoded an invalid message: %v", err)
		}
		if p, _ := intCol("part", raw.part); p < 0 || p >= Partitions {
			t.Fatalf("decoded part %d", p)
		}
	})
}
