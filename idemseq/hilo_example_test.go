package idemseq_test

import (
	"context"
	"database/sql"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/idemhq/idem/idemseq"
	"github.com/idemhq/idem/idemsqlite"
)

// Ids come from blocks of 100 reserved in a SQLite table: one write per 100 ids. A
// process that stops abandons the rest of its block, so the next one starts at 101:
// a gap, never a repeat. On Postgres, idempg.HiLoSequence takes the place of
// idemsqlite.HiLoTable (with a pgx pool, open db with stdlib.OpenDBFromPool(pool)); on
// MySQL/MariaDB, idemmysql.HiLoTable does.
func ExampleHiLo() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "idemseq-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "ids.db")+"?_pragma=journal_mode(WAL)&_pragma=busy_timeout(10000)")
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()

	src, err := idemsqlite.HiLoTable(ctx, db, "order_ids", 100)
	if err != nil {
		log.Fatal(err)
	}
	ids := idemseq.NewHiLo(src)
	for range 3 {
		id, err := ids.Next(ctx)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println("order", id)
	}

	restarted := idemseq.NewHiLo(src) // as a new process would
	id, err := restarted.Next(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("after restart, order", id)
	// Output:
	// order 1
	// order 2
	// order 3
	// after restart, order 101
}
