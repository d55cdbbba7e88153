package stream

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"net/url"
	"strconv"
)

// Limits on what a peer sends.
const (
	// MaxSeq is the highest seq a store can hold (the SQL stores keep it in a
	// BIGINT). A since or ack above it is bad input.
	MaxSeq = math.MaxInt64
	// MaxClientID is the longest client id a hello may carry.
	MaxClientID = 128
	// maxFrame is the read limit of a client's frame: a hello or an ack is far
	// smaller.
	maxFrame = 4 << 10
	// DefaultEventsLimit and MaxEventsLimit bound GET /events' limit parameter.
	DefaultEventsLimit = 1000
	MaxEventsLimit     = 10000
)

// hello is a client's first frame, parsed and checked.
type hello struct {
	Channel string
	Since   uint64
	Client  string
	Batch   bool // the client reads "events" frames (several events in one)
}

// wireIn is a frame from a client as sent: numbers are kept as text so that a
// negative, fractional or overflowing one gets its own error.
type wireIn struct {
	Type    string          `json:"type"`
	Channel string          `json:"channel"`
	Since   json.RawMessage `json:"since"`
	Client  string          `json:"client"`
	Seq     json.RawMessage `json:"seq"`
	Batch   bool            `json:"batch"`
}

const helloShape = `{"type":"hello","channel":"…","since":N,"client":"…"}`

// parseHello parses a client's first frame. It checks the shape and the ranges
// that do not depend on the channel; the server compares since with the head.
func parseHello(data []byte) (hello, error) {
	var f wireIn
	if err := json.Unmarshal(data, &f); err != nil || f.Type != "hello" {
		return hello{}, fmt.Errorf("the first frame must be %s", helloShape)
	}
	since, err := parseSeq("since", f.Since)
	if err != nil {
		return hello{}, err
	}
	if err := validateChannel(f.Channel); err != nil {
		return hello{}, err
	}
	if err := validateClientID(f.Client); err != nil {
		return hello{}, err
	}
	return hello{Channel: f.Channel, Since: since, Client: f.Client, Batch: f.Batch}, nil
}

// parseAck parses an ack frame and returns its seq.
func parseAck(data []byte) (uint64, error) {
	var f wireIn
	if err := json.Unmarshal(data, &f); err != nil || f.Type != "ack" {
		return 0, fmt.Errorf(`expected {"type":"ack","seq":N}`)
	}
	if len(f.Seq) == 0 || bytes.Equal(f.Seq, []byte("null")) {
		return 0, fmt.Errorf(`ack without a seq: send {"type":"ack","seq":N}`)
	}
	return parseSeq("seq", f.Seq)
}

// parseSeq reads a JSON number that must be a whole number from 0 to MaxSeq.
// Absent (or null) is 0.
func parseSeq(field string, raw json.RawMessage) (uint64, error) {
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return 0, nil
	}
	return seqFromText(field, string(raw))
}

func seqFromText(field, text string) (uint64, error) {
	n, err := strconv.ParseUint(text, 10, 64)
	if err != nil || n > MaxSeq {
		return 0, fmt.Errorf("%s must be a whole number from 0 to %d (got %.40s)", field, uint64(MaxSeq), text)
	}
	return n, nil
}

// validateClientID accepts the ids our clients make (UUIDs) and any short
// printable name; empty means "let the server name the connection".
func validateClientID(id string) error {
	if len(id) > MaxClientID {
		return fmt.Errorf("client id is %d bytes: keep it under %d (a UUID is 36)", len(id), MaxClientID)
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; c < 0x21 || c > 0x7e {
			return fmt.Errorf("client id has byte %#x at %d: use printable ASCII, e.g. a UUID", c, i)
		}
	}
	return nil
}

// eventsQuery is GET /events' query, parsed and checked.
type eventsQuery struct {
	Channel string
	Since   uint64
	Limit   int
}

// parseEventsQuery parses GET /events?channel=C&since=N&limit=L. since above
// the head is checked by the handler, which knows it.
func parseEventsQuery(q url.Values) (eventsQuery, error) {
	out := eventsQuery{Channel: q.Get("channel"), Limit: DefaultEventsLimit}
	for _, name := range []string{"channel", "since", "limit"} {
		if len(q[name]) > 1 {
			return out, fmt.Errorf("%s is given %d times: give it once", name, len(q[name]))
		}
	}
	if err := validateChannel(out.Channel); err != nil {
		return out, err
	}
	if s := q.Get("since"); s != "" {
		since, err := seqFromText("since", s)
		if err != nil {
			return out, fmt.Errorf("%w: the last seq the client processed, 0 for none", err)
		}
		out.Since = since
	}
	if l := q.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 || n > MaxEventsLimit {
			return out, fmt.Errorf("limit must be a whole number from 1 to %d (got %.40s)", MaxEventsLimit, l)
		}
		out.Limit = n
	}
	return out, nil
}
