package idemseq_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	_ "github.com/jackc/pgx/v5/stdlib"
	_ "modernc.org/sqlite"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemseq"
	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/idemtest"
	"github.com/idemhq/idem/internal/testsvc"
)

func openSQLite(t *testing.T) *sql.DB {
	t.Helper()
	path := filepath.Join(t.TempDir(), "seq.db")
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)"+
		"&_pragma=busy_timeout(10000)&_txlock=immediate")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func openPostgres(t *testing.T) *sql.DB {
	t.Helper()
	return testsvc.PostgresDB(t)
}

func sqlHarness(open func(*testing.T) *sql.DB, maxSteps int) idemtest.SeqHarness {
	return idemtest.SeqHarness{MaxSteps: maxSteps, New: func(t *testing.T, cfg idemseq.Config) idemseq.Tracker {
		tr, err := idemseq.OpenSQL(context.Background(), open(t), cfg)
		if err != nil {
			t.Fatal(err)
		}
		return tr
	}}
}

func openMySQL(t *testing.T) *sql.DB {
	t.Helper()
	return testsvc.MySQLDB(t)
}

// sqlDBs are the databases the SQL tracker runs on, with the most steps the
// suite's model checks take on each (0: the suite's default).
var sqlDBs = []struct {
	name     string
	open     func(*testing.T) *sql.DB
	maxSteps int
}{
	{"sqlite", openSQLite, 0},
	{"postgres", openPostgres, 30},
	{"mysql", openMySQL, 30},
}

func TestSQLSuite(t *testing.T) {
	t.Parallel()
	for _, db := range sqlDBs {
		t.Run(db.name, func(t *testing.T) {
			t.Parallel()
			idemtest.SeqSuite(t, sqlHarness(db.open, db.maxSteps))
		})
	}
}

func TestSQLCheckTx(t *testing.T) {
	t.Parallel()
	for _, db := range sqlDBs {
		t.Run(db.name, func(t *testing.T) {
			t.Parallel()
			testCheckTx(t, db.open(t))
		})
	}
}

// testCheckTx shows the number and the effect commit together: a rolled-back
// transaction records neither, so the redelivery is applied; a committed one records
// both, so the redelivery is a duplicate; racing deliveries apply one effect.
func testCheckTx(t *testing.T, db *sql.DB) {
	ctx := context.Background()
	tr, err := idemseq.OpenSQL(ctx, db, idemseq.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, "CREATE TABLE effects (producer TEXT, seq BIGINT)"); err != nil {
		t.Fatal(err)
	}
	apply := func(seq uint64, commit bool) (idemseq.Verdict, error) {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return 0, err
		}
		defer tx.Rollback()
		v, err := tr.CheckTx(ctx, tx, "p", 1, seq)
		if err != nil || v != idemseq.Accepted {
			return v, err
		}
		query, args := idemsql.Rebind("INSERT INTO effects VALUES ('p', $1)", []any{int64(seq)})
		if !strings.Contains(fmt.Sprintf("%T", db.Driver()), "mysql") {
			query, args = "INSERT INTO effects VALUES ('p', $1)", []any{int64(seq)}
		}
		if _, err := tx.ExecContext(ctx, query, args...); err != nil {
			return 0, err
		}
		if !commit {
			return v, nil // a crash before commit: tx rolls back
		}
		return v, tx.Commit()
	}
	if v, err := apply(7, false); err != nil || v != idemseq.Accepted {
		t.Fatalf("first delivery (rolled back) = %v, %v", v, err)
	}
	if v, err := apply(7, true); err != nil || v != idemseq.Accepted {
		t.Fatalf("redelivery after rollback = %v, %v; want accepted: the rollback must not record 7", v, err)
	}
	if v, err := apply(7, true); err != nil || v != idemseq.Duplicate {
		t.Fatalf("redelivery after commit = %v, %v; want duplicate", v, err)
	}

	var wg sync.WaitGroup
	errs := make(chan error, 8*50)
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for seq := uint64(100); seq < 150; seq++ {
				if _, err := apply(seq, true); err != nil {
					errs <- err
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("concurrent delivery: %v", err)
	}
	var rows, distinct int
	if err := db.QueryRowContext(ctx, "SELECT COUNT(*), COUNT(DISTINCT seq) FROM effects WHERE seq >= 100").Scan(&rows, &distinct); err != nil {
		t.Fatal(err)
	}
	if rows != 50 || distinct != 50 {
		t.Fatalf("8 deliveries of 50 numbers applied %d effects (%d distinct), want 50", rows, distinct)
	}
}

func TestSQLResizedWindowKeepsCoveredNumbers(t *testing.T) {
	t.Parallel()
	db := openSQLite(t)
	ctx := context.Background()
	small, err := idemseq.OpenSQL(ctx, db, idemseq.Config{Window: 64})
	if err != nil {
		t.Fatal(err)
	}
	for _, seq := range []uint64{1000, 990, 950} {
		if v, err := small.Check(ctx, "p", 0, seq); err != nil || v != idemseq.Accepted {
			t.Fatalf("Check(%d) = %v, %v", seq, v, err)
		}
	}
	big, err := idemseq.OpenSQL(ctx, db, idemseq.Config{Window: 1024})
	if err != nil {
		t.Fatal(err)
	}
	for seq, want := range map[uint64]idemseq.Verdict{990: idemseq.Duplicate, 950: idemseq.Duplicate, 900: idemseq.Accepted} {
		if v, err := big.Check(ctx, "p", 0, seq); err != nil || v != want {
			t.Errorf("after growing the window, Check(%d) = %v, %v; want %v", seq, v, err, want)
		}
	}
	small2, _ := idemseq.OpenSQL(ctx, db, idemseq.Config{Window: 64})
	if v, err := small2.Check(ctx, "p", 0, 990); err != nil || v != idemseq.Duplicate {
		t.Errorf("after shrinking back, Check(990) = %v, %v; want duplicate", v, err)
	}
}

func TestSQLBadConfigAndDeadDatabase(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openSQLite(t)
	if _, err := idemseq.OpenSQL(ctx, db, idemseq.Config{Window: 1000}); !errors.Is(err, idem.ErrInvalid) {
		t.Errorf("Window 1000: %v, want idem.ErrInvalid", err)
	}
	tr, err := idemseq.OpenSQL(ctx, db, idemseq.Config{})
	if err != nil {
		t.Fatal(err)
	}
	db.Close()
	_, err = tr.Check(ctx, "p", 0, 1)
	var be *idem.BackendError
	if !errors.As(err, &be) || be.Backend != "sqlite" || be.Op != "seq.check" {
		t.Fatalf("Check on a closed database = %v, want an *idem.BackendError from sqlite seq.check", err)
	}
}
