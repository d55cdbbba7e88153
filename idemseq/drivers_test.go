package idemseq_test

// The drivers, so idemsql.SQLDB finds the one of each database the tests open.
import (
	_ "github.com/idemhq/idem/idemmysql"
	_ "github.com/idemhq/idem/idempg"
	_ "github.com/idemhq/idem/idemsqlite"
)
