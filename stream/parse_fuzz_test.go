package stream

import (
	"encoding/json"
	"net/url"
	"strconv"
	"testing"
	"unicode/utf8"
)

// The parsers of what a peer sends never panic, and what they accept is in
// range: run with go test -fuzz FuzzParseHello ./stream/ (and the others).

func FuzzParseHello(f *testing.F) {
	for _, s := range []string{
		`{"type":"hello","channel":"user:1","since":0}`,
		`{"type":"hello","channel":"user:1","since":42,"client":"0b8f1c5e-4a1e-4c7b-9a51-3c4b1f3e2d10"}`,
		`{"type":"hello","channel":"c","since":18446744073709551615}`,
		`{"type":"hello","channel":"c","since":9223372036854775807}`,
		`{"type":"hello","channel":"c","since":-1}`,
		`{"type":"hello","channel":"c","since":1e3}`,
		`{"type":"hello","channel":"c","since":"7"}`,
		`{"type":"hello","channel":"c","since":null}`,
		`{"type":"hello","channel":"","since":0}`,
		`{"type":"hello","channel":"\u00ff\ud800"}`,
		`{"type":"hello","channel":"c","client":"a b"}`,
		`{"type":"hello","type":"ack"}`,
		`{"type":"ack","seq":1}`,
		`[]`, `null`, `{`, ``,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		h, err := parseHello(data)
		if err != nil {
			if err.Error() == "" {
				t.Fatal("an error without a reason")
			}
			return
		}
		if h.Since > MaxSeq {
			t.Fatalf("accepted since %d > MaxSeq", h.Since)
		}
		if h.Channel == "" || len(h.Channel) > MaxChannel || !utf8.ValidString(h.Channel) {
			t.Fatalf("accepted channel %q", h.Channel)
		}
		if len(h.Client) > MaxClientID {
			t.Fatalf("accepted client id of %d bytes", len(h.Client))
		}
		// What was accepted round-trips: the since is the number that was sent.
		var back struct {
			Since json.Number `json:"since"`
		}
		if json.Unmarshal(data, &back) == nil && back.Since != "" {
			if n, err := strconv.ParseUint(string(back.Since), 10, 64); err != nil || n != h.Since {
				t.Fatalf("since %q parsed as %d", back.Since, h.Since)
			}
		}
	})
}

func FuzzParseAck(f *testing.F) {
	for _, s := range []string{
		`{"type":"ack","seq":1}`,
		`{"type":"ack","seq":0}`,
		`{"type":"ack","seq":9223372036854775808}`,
		`{"type":"ack","seq":18446744073709551615}`,
		`{"type":"ack","seq":-5}`,
		`{"type":"ack","seq":1.0}`,
		`{"type":"ack","seq":"1"}`,
		`{"type":"ack"}`,
		`{"type":"ack","seq":null}`,
		`{"type":"hello","seq":1}`,
		`{"seq":1}`, `"ack"`, `{{`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		seq, err := parseAck(data)
		if err != nil {
			if err.Error() == "" {
				t.Fatal("an error without a reason")
			}
			return
		}
		if seq > MaxSeq {
			t.Fatalf("accepted seq %d > MaxSeq", seq)
		}
	})
}

func FuzzParseEventsQuery(f *testing.F) {
	for _, s := range []string{
		"channel=user:1",
		"channel=user:1&since=5&limit=100",
		"channel=c&since=18446744073709551615",
		"channel=c&since=-1",
		"channel=c&since=+1",
		"channel=c&since=0x10",
		"channel=c&limit=0",
		"channel=c&limit=10001",
		"channel=c&limit=99999999999999999999",
		"channel=c&channel=d",
		"channel=%ff",
		"since=1",
		"channel=c;since=1",
		"%zz",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		vals, err := url.ParseQuery(raw)
		if err != nil {
			return
		}
		q, err := parseEventsQuery(vals)
		if err != nil {
			if err.Error() == "" {
				t.Fatal("an error without a reason")
			}
			return
		}
		if q.Since > MaxSeq || q.Limit < 1 || q.Limit > MaxEventsLimit {
			t.Fatalf("accepted %+v", q)
		}
		if q.Channel == "" || len(q.Channel) > MaxChannel || !utf8.ValidString(q.Channel) {
			t.Fatalf("accepted channel %q", q.Channel)
		}
	})
}
