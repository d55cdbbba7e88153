package idemnats_test

import (
	"context"
	"errors"
	"testing"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemnats"
)

// NATS trims the spaces around header values on the wire: an ID " a" would reach
// JetStream as "a" and be dropped as a duplicate of message "a", and a header
// value would arrive changed. The sink refuses both; nothing is lost silently.
func TestSpacesAroundHeaderValues(t *testing.T) {
	t.Parallel()
	_, js := connect(t)
	stream, prefix := newStream(t, js)
	sink := newSink(t, js, idemnats.SinkConfig{})
	ctx := context.Background()
	publish(t, sink, idem.Message{ID: "a", Topic: prefix + ".orders", Payload: []byte("1")})
	for _, m := range []idem.Message{
		{ID: " a", Topic: prefix + ".orders", Payload: []byte("2")},
		{ID: "a ", Topic: prefix + ".orders", Payload: []byte("3")},
		{ID: "b", Topic: prefix + ".orders", Payload: []byte("4"), Headers: map[string]string{"Trace": " x\t"}},
	} {
		if err := sink.Publish(ctx, m); !errors.Is(err, idem.ErrInvalid) {
			t.Errorf("Publish(%q, headers %q) = %v, want an *idem.InputError", m.ID, m.Headers, err)
		}
	}
	if n := streamMsgs(t, js, stream); n != 1 {
		t.Errorf("stream holds %d messages, want 1", n)
	}
}
