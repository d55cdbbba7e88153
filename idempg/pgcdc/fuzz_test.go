package pgcdc

import (
	"testing"

	"github.com/jackc/pglogrepl"
)

// The decoder of server bytes, outbox rows and emitted messages returns errors,
// never panics.
func FuzzDecode(f *testing.F) {
	f.Add([]byte("B\x00\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x01"))
	f.Add([]byte("I\x00\x00\x00\x01N\x00\x05t\x00\x00\x00\x01a"))
	// An outbox row: id, msg_id, topic, ordering_key, headers, payload, parked_at.
	f.Add([]byte("I\x00\x00\x00\x01N\x00\x07t\x00\x00\x00\x011t\x00\x00\x00\x01at\x00\x00\x00\x01tt\x00\x00\x00\x00" +
		"t\x00\x00\x00\x02{}t\x00\x00\x00\x04\\x00n"))
	f.Add([]byte(`{"id":"a","topic":"t","payload":"AAE="}`))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		if m, err := parse(data); err == nil {
			if ins, ok := m.(*pglogrepl.InsertMessage); ok {
				rel := &relation{id: 0, msgID: 1, topic: 2, key: 3, headers: 4, payload: 5, parked: 6, n: 7}
				rel.decode(ins.Tuple)
			}
		}
		decodeEmitted(data)
	})
}
