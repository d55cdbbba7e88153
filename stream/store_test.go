package stream_test

import (
	"context"
	"database/sql"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/internal/sqltest"
	"github.com/idemhq/idem/internal/testsvc"
	"github.com/idemhq/idem/stream"
	"github.com/idemhq/idem/stream/streamtest"
)

// The Store contract, on SQLite, Postgres and Redis.
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
	t.Run("redis", func(t *testing.T) {
		t.Parallel()
		streamtest.StoreSuite(t, streamtest.Harness{New: func(t *testing.T, cfg streamtest.Config) stream.Store {
			testsvc.Reach(t, "redis", testsvc.RedisAddr())
			c := redis.NewClient(&redis.Options{Addr: testsvc.RedisAddr()})
			t.Cleanup(func() { c.Close() })
			s, err := stream.NewRedisStore(c, stream.RedisConfig{Prefix: testsvc.RedisPrefix(t), Now: cfg.Now, MaxClients: cfg.MaxClients})
			if err != nil {
				t.Fatal(err)
			}
			return s
		}})
	})
}
