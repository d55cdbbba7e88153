package idemsqlite

import (
	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/internal/streamsql"
)

func (driver) Stream() *idemsql.StreamSQL { return &streamStmts }

// streamStmts are the statements of a database that speaks ON CONFLICT and
// RETURNING (streamsql.OnConflict), with one writer at a time.
var streamStmts = func() idemsql.StreamSQL {
	s := streamsql.OnConflict()
	s.OneWriter = true
	return s
}()
