package open

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/cmd/idem/internal/cli"
	"github.com/idemhq/idem/idemmem"
	"github.com/idemhq/idem/idemmysql"
	"github.com/idemhq/idem/idempg"
	"github.com/idemhq/idem/idemsqlite"
	"github.com/idemhq/idem/internal/redact"
)

// StoreSpec is a --store URL, checked without connecting: Open connects.
type StoreSpec struct {
	Kind   string // sqlite, postgres, redis, memory
	Raw    string
	Desc   string // for logs, without passwords
	Path   string // sqlite
	redis  *redis.Options
	prefix string // redis key prefix (?prefix=), empty for idemredis.DefaultPrefix
	// cluster is redis-cluster://'s client options and WAIT settings.
	cluster *redisClusterSpec
	// maxBytes is the memory store's budget (?max_bytes=): 0 for idemmem's default,
	// negative for none.
	maxBytes int64
	// keepKeys makes the memory store remember its keys, so the admin API can list
	// them (serve --admin-token).
	KeepKeys bool
}

// ParseStore checks --store. Its errors are usage errors: they name the flag and the fix.
func ParseStore(raw string) (StoreSpec, error) {
	s := StoreSpec{Raw: raw, Desc: redact.URL(raw)}
	if err := cli.CheckURL("--store", raw); err != nil {
		return s, err
	}
	switch {
	case raw == "memory:" || strings.HasPrefix(raw, "memory:?"):
		return parseMemoryStore(s)
	case strings.HasPrefix(raw, "sqlite:"):
		s.Kind, s.Path = "sqlite", strings.TrimPrefix(raw, "sqlite:")
		if s.Path == "" {
			return s, errors.New("--store sqlite: needs a file path, such as sqlite:idem-gateway.db (created if missing)")
		}
		s.Desc = "sqlite (" + strings.TrimPrefix(s.Desc, "sqlite:") + ")"
	case strings.HasPrefix(raw, "postgres://"), strings.HasPrefix(raw, "postgresql://"):
		s.Kind = "postgres"
		cfg, err := pgxpool.ParseConfig(raw)
		if err != nil {
			return s, fmt.Errorf("--store %s: %s: use postgres://user:pass@host:5432/db", s.Desc, redact.String(err.Error()))
		}
		s.Desc = fmt.Sprintf("postgres (%s:%d/%s)", cfg.ConnConfig.Host, cfg.ConnConfig.Port, cfg.ConnConfig.Database)
	case strings.HasPrefix(raw, "redis://"), strings.HasPrefix(raw, "rediss://"):
		return parseRedisStore(s)
	case strings.HasPrefix(raw, "redis-cluster://"):
		return parseRedisClusterStore(s)
	case strings.HasPrefix(raw, "mysql://"):
		return parseMySQLStore(s)
	default:
		//lint:ignore ST1005 the message ends with what to type, the URL "memory:"
		return s, fmt.Errorf("--store %q: unknown store; use sqlite:PATH, postgres://user@host:5432/db, "+
			"mysql://user@host:3306/db, redis://host:6379[/db] or memory:", s.Desc)
	}
	return s, nil
}

// parseMemoryStore checks --store memory:[?max_bytes=N].
func parseMemoryStore(s StoreSpec) (StoreSpec, error) {
	raw := s.Raw
	s.Kind = "memory"
	q, err := url.ParseQuery(strings.TrimPrefix(raw, "memory:?"))
	if raw == "memory:" {
		q, err = url.Values{}, nil
	}
	for name := range q {
		if name != "max_bytes" && err == nil {
			err = fmt.Errorf("unknown option %q", name)
		}
	}
	if err == nil && q.Has("max_bytes") {
		s.maxBytes, err = idemmem.ParseMaxBytes(q.Get("max_bytes"))
	}
	if err != nil {
		return s, fmt.Errorf("--store %s: %v: use memory: or memory:?max_bytes=512MiB (the most its records may take; -1 for no limit)", raw, err)
	}
	budget := "512MiB"
	switch {
	case s.maxBytes < 0:
		budget = "no limit"
	case s.maxBytes > 0:
		budget = strconv.FormatInt(s.maxBytes, 10) + " bytes"
	}
	s.Desc = "memory (lost on restart, not shared between gateways; at most " + budget + ")"
	return s, nil
}

// parseRedisStore checks --store redis://…[?prefix=P].
func parseRedisStore(s StoreSpec) (StoreSpec, error) {
	s.Kind = "redis"
	// prefix is ours, not go-redis's: take it out before ParseURL, which refuses
	// options it does not know.
	u, err := url.Parse(s.Raw)
	if err != nil { // checkURL refused it already
		return s, fmt.Errorf("--store %s: not a URL: use redis://host:6379[/db][?prefix=idem:]", s.Desc)
	}
	q := u.Query()
	s.prefix = q.Get("prefix")
	q.Del("prefix")
	u.RawQuery = q.Encode()
	opts, err := redis.ParseURL(u.String())
	if err != nil {
		return s, fmt.Errorf("--store %s: %s: use redis://host:6379[/db][?prefix=idem:]", s.Desc, redact.String(err.Error()))
	}
	s.redis = opts
	s.Desc = fmt.Sprintf("redis (%s db %d)", opts.Addr, opts.DB)
	return s, nil
}

// ExistingStore opens the store of --store as serve does (for idem keys), but changes no schema
// (SkipMigrate): a mistyped database gets an error naming the missing table's
// migration, not a new empty table.
func ExistingStore(ctx context.Context, spec StoreSpec) (idem.Store, func(), error) {
	switch spec.Kind {
	case "sqlite":
		st, err := idemsqlite.Open(ctx, spec.Path, idemsqlite.Config{SkipMigrate: true})
		if err != nil {
			return nil, nil, fmt.Errorf("--store %s: %w", spec.Desc, err)
		}
		return st, func() { _ = st.Close() }, nil
	case "postgres":
		pool, err := Postgres(ctx, "--store", spec.Desc, spec.Raw)
		if err != nil {
			return nil, nil, err
		}
		st, err := idempg.New(ctx, pool, idempg.Config{SkipMigrate: true})
		if err != nil {
			pool.Close()
			return nil, nil, fmt.Errorf("--store %s: %w", spec.Desc, err)
		}
		return st, pool.Close, nil
	case "mysql":
		st, err := idemmysql.Open(ctx, spec.Raw, idemmysql.Config{SkipMigrate: true})
		if err != nil {
			return nil, nil, fmt.Errorf("--store %s: %w", spec.Desc, err)
		}
		return st, func() { st.Close() }, nil
	}
	return spec.Open(ctx, prometheus.NewRegistry()) // redis: no schema
}
