package pgcluster_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/idemhq/idem/internal/pgcluster"
)

// TestStart proves a cluster starts with logical decoding on and is gone after Stop.
func TestStart(t *testing.T) {
	ctx := context.Background()
	c, err := pgcluster.Start(ctx, pgcluster.Options{})
	if err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, c.URL)
	if err != nil {
		c.Stop(ctx)
		t.Fatal(err)
	}
	var level string
	err = conn.QueryRow(ctx, "SHOW wal_level").Scan(&level)
	conn.Close(ctx)
	if err != nil || level != "logical" {
		t.Errorf("wal_level = %q, %v; want logical", level, err)
	}
	if err := c.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := pgx.Connect(ctx, c.URL); err == nil {
		t.Error("server still answers after Stop")
	}
}

// TestKillRestart proves Kill leaves no process of the server behind (the port is
// free) and Restart recovers the committed rows from the WAL on the same port.
func TestKillRestart(t *testing.T) {
	ctx := context.Background()
	c, err := pgcluster.Start(ctx, pgcluster.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Stop(context.Background()) })
	conn, err := pgx.Connect(ctx, c.URL)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "CREATE TABLE t (n int); INSERT INTO t SELECT generate_series(1, 1000)"); err != nil {
		t.Fatal(err)
	}
	// A backend busy in a CPU-bound query notices the postmaster's death only at
	// its next wait: Kill must kill it too, or it keeps the shared memory and the
	// restart fails.
	busy, err := pgx.Connect(ctx, c.URL)
	if err != nil {
		t.Fatal(err)
	}
	var busyPID int
	if err := busy.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&busyPID); err != nil {
		t.Fatal(err)
	}
	started := make(chan struct{})
	go func() {
		close(started)
		_, _ = busy.Exec(context.Background(), "SELECT count(*) FROM generate_series(1, 10000000000)")
	}()
	<-started
	for i := 0; ; i++ { // until the query runs, by the server's word
		var state string
		if err := conn.QueryRow(ctx, "SELECT state FROM pg_stat_activity WHERE pid = $1", busyPID).Scan(&state); err != nil {
			t.Fatal(err)
		}
		if state == "active" {
			break
		}
		if i == 5000 {
			t.Fatal("the busy query never started")
		}
	}
	if err := c.Kill(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(fmt.Sprintf("/proc/%d", busyPID)); err == nil {
		if b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", busyPID)); !strings.Contains(string(b), ") Z ") {
			t.Errorf("backend %d still runs after Kill: %s", busyPID, b)
		}
	}
	// The held connection's backend died with the postmaster.
	if _, err := conn.Exec(ctx, "SELECT 1"); err == nil {
		t.Error("a connection of the killed server still answers")
	}
	if l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", c.Port)); err != nil {
		t.Errorf("the port is still held after Kill: %v", err)
	} else {
		l.Close()
	}
	if err := c.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	conn, err = pgx.Connect(ctx, c.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var n int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM t").Scan(&n); err != nil || n != 1000 {
		t.Errorf("after Restart: %d rows, %v; want 1000", n, err)
	}
}

// TestReplicatedFailover proves, for synchronous and asynchronous replication,
// that the standbys stream, that the multi-host URL follows the primary through
// KillPrimary and Promote, and (sync) that every commit acknowledged before the
// kill is on the promoted standby, which accepts writes with the other standby
// re-pointed at it.
func TestReplicatedFailover(t *testing.T) {
	for _, sync := range []bool{true, false} {
		name := map[bool]string{true: "sync", false: "async"}[sync]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			r, err := pgcluster.StartReplicated(ctx, pgcluster.ReplicatedOptions{Sync: sync})
			if err != nil {
				t.Fatal(err)
			}
			defer func() {
				if err := r.Stop(ctx); err != nil {
					t.Error(err)
				}
			}()
			if r.Nodes() != 3 {
				t.Fatalf("Nodes() = %d, want 3", r.Nodes())
			}
			conn, err := pgx.Connect(ctx, r.URL())
			if err != nil {
				t.Fatal(err)
			}
			if _, err := conn.Exec(ctx, "CREATE TABLE acked (n int PRIMARY KEY)"); err != nil {
				t.Fatal(err)
			}
			const n = 200
			for i := range n {
				if _, err := conn.Exec(ctx, "INSERT INTO acked VALUES ($1)", i); err != nil {
					t.Fatal(err)
				}
			}
			if err := r.KillPrimary(ctx); err != nil {
				t.Fatal(err)
			}
			if _, err := conn.Exec(ctx, "INSERT INTO acked VALUES (-1)"); err == nil {
				t.Fatal("a write succeeded on the killed primary's connection")
			}
			conn.Close(ctx)
			next, err := r.MostAdvanced(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if err := r.Promote(ctx, next); err != nil {
				t.Fatal(err)
			}
			if r.Primary() != next {
				t.Fatalf("Primary() = %d after Promote(%d)", r.Primary(), next)
			}
			conn, err = pgx.Connect(ctx, r.URL()) // follows to the new primary
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close(ctx)
			var got int
			if err := conn.QueryRow(ctx, "SELECT count(*) FROM acked").Scan(&got); err != nil {
				t.Fatal(err)
			}
			if sync && got != n {
				t.Errorf("sync: %d of %d acknowledged rows on the promoted standby", got, n)
			}
			t.Logf("%s: %d of %d acknowledged rows survived; promoted %s", name, got, n, r.Name(next))
			if _, err := conn.Exec(ctx, "INSERT INTO acked VALUES (-2)"); err != nil {
				t.Fatalf("write on the new primary: %v", err)
			}
		})
	}
}
