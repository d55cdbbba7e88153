package pgcluster_test

import (
	"context"
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
