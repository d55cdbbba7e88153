package idempg

import (
	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/internal/streamsql"
)

func (driver) Stream() *idemsql.StreamSQL { return &streamStmts }

// streamStmts are the statements of a database that speaks ON CONFLICT and
// RETURNING (streamsql.OnConflict).
var streamStmts = streamsql.OnConflict()
