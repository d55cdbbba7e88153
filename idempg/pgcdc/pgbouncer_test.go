package pgcdc_test

import (
	"context"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idempg/pgcdc"
	"github.com/idemhq/idem/internal/testsvc"
)

type discardSink struct{}

func (discardSink) Publish(context.Context, ...idem.Message) error { return nil }

// Through PgBouncer (transaction pooling) the log-based relay cannot work: neither
// the replication protocol nor the slot's session advisory lock passes. Setup and
// Run refuse at once, before any other check, naming the fix; Run does not retry it.
func TestPgBouncerRefused(t *testing.T) {
	t.Parallel()
	pooled := testsvc.PgBouncer(t, testsvc.PostgresDatabase(t))
	r, err := pgcdc.New(pooled, discardSink{}, pgcdc.Config{Slot: testsvc.UniqueName("slot_")})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const fix = "connect the CDC relay to the server directly, not through the pooler"
	setupErr(t, r.Setup(ctx), "pooler", fix, "PgBouncer")
	setupErr(t, r.Run(ctx), "pooler", fix)
}
