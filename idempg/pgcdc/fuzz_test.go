package pgcdc

import (
	"testing"

	"github.com/jackc/pglogrepl"
)

// The decoder of server bytes and of emitted messages returns errors, never panics.
func FuzzDecode(f *testing.F) {
	f.Add([]byte("B\x00\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x01"))
	f.Add([]byte("I\x00\x00\x00\x01N\x00\x05t\x00\x00\x00\x01a"))
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
