package mariadbproc_test

import (
	"context"
	"database/sql"
	"fmt"
	"net"
	"testing"

	_ "github.com/go-sql-driver/mysql"

	"github.com/idemhq/idem/internal/mariadbproc"
	"github.com/idemhq/idem/internal/testsvc"
)

// TestKillRestart proves a private server starts, loses no committed row to a
// SIGKILL, frees its port, and comes back on the same port.
func TestKillRestart(t *testing.T) {
	testsvc.MariaDBServerBinaries(t)
	ctx := context.Background()
	s, err := mariadbproc.Start(ctx, mariadbproc.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Stop() })
	db, err := sql.Open("mysql", s.DSN)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, q := range []string{"CREATE DATABASE crash", "CREATE TABLE crash.t (n INT) ENGINE=InnoDB"} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 200 {
		if _, err := db.ExecContext(ctx, "INSERT INTO crash.t VALUES (?)", i); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := db.PingContext(ctx); err == nil {
		t.Error("the killed server still answers")
	}
	if l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", s.Port)); err != nil {
		t.Errorf("the port is still held after Kill: %v", err)
	} else {
		l.Close()
	}
	if err := s.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	// The same pool: its dead connections are dropped and new ones dialled.
	var n int
	if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM crash.t").Scan(&n); err != nil || n != 200 {
		t.Errorf("after Restart: %d rows, %v; want 200", n, err)
	}
}
