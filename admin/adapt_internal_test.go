package admin

import (
	"errors"
	"reflect"
	"testing"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/stream"
)

func TestStreamStatusOf(t *testing.T) {
	t.Parallel()
	got := streamStatusOf(stream.StreamStatus{
		Channels:      []stream.ChannelStatus{{Name: "orders", LastSeq: 9, Clients: 2}},
		TotalChannels: 1,
		Clients: []stream.ClientStatus{{Channel: "orders", ID: "alice/c1", Sent: 9, Acked: 4, Lag: 5},
			{Channel: "orders", ID: "c2", Sent: 9, Acked: 9}},
		TotalClients: 2,
	})
	want := StreamStatus{
		Channels: []StreamChannel{{Name: "orders", LastSeq: 9, Clients: 2}},
		Clients: []StreamClient{{ID: "alice/c1", Channel: "orders", SentSeq: 9, AckedSeq: 4, Lag: 5},
			{ID: "c2", Channel: "orders", SentSeq: 9, AckedSeq: 9}},
		TotalChannels: 1, TotalClients: 2,
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v\nwant %+v", got, want)
	}
	if empty := streamStatusOf(stream.StreamStatus{}); empty.Channels == nil || empty.Clients == nil {
		t.Fatalf("empty status has nil lists: %+v", empty)
	}
}

func TestIDCursor(t *testing.T) {
	t.Parallel()
	for _, id := range []int64{1, 42, 1<<63 - 1} {
		got, err := decodeIDCursor(encodeIDCursor(id))
		if err != nil || got != id {
			t.Errorf("round trip of %d: %d, %v", id, got, err)
		}
	}
	if got, err := decodeIDCursor(""); got != 0 || err != nil {
		t.Errorf("empty cursor: %d, %v", got, err)
	}
	for _, bad := range []string{"0", "-1", "007", "+7", "1e3", "9223372036854775808", "x", " 1"} {
		var ie *idem.InputError
		if _, err := decodeIDCursor(bad); !errors.As(err, &ie) || ie.Field != "cursor" {
			t.Errorf("cursor %q: %v, want an InputError on cursor", bad, err)
		}
	}
}

func TestSagaConflict(t *testing.T) {
	t.Parallel()
	se := errors.New("saga s is completed: cannot retry it")
	if err := sagaConflict(se); !errors.Is(err, ErrConflict) || err.Error() != se.Error() || !errors.Is(err, se) {
		t.Errorf("state error: %v", err)
	}
	for _, keep := range []error{nil, idem.ErrNotFound, &idem.InputError{Field: "reason"}, &idem.BackendError{Backend: "saga", Err: se}} {
		if err := sagaConflict(keep); errors.Is(err, ErrConflict) {
			t.Errorf("%v became a conflict", keep)
		}
	}
}
