package stream_test

import (
	"context"
	"database/sql"
	"testing"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/internal/sqltest"
	"github.com/idemhq/idem/stream"
	"github.com/idemhq/idem/stream/streamtest"
)

// The Store contract, on SQLite and Postgres (idemredis runs it on Redis).
func TestStoreSuite(t *testing.T) {
	t.Parallel()
	for name, open := range map[string]func(testing.TB) idem.TxDB[*sql.Tx]{"sqlite": sqltest.SQLite, "postgres": sqltest.Postgres} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			streamtest.StoreSuite(t, streamtest.Harness{New: func(t *testing.T, cfg streamtest.Config) stream.Store {
				s, err := stream.NewSQLStore(context.Background(), open(t), stream.SQLConfig{Now: cfg.Now, MaxClients: cfg.MaxClients})
				if err != nil {
					t.Fatal(err)
				}
				return s
			}})
		})
	}
}
