package main

import (
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/idemhq/idem/cmd/idem/internal/cli"
	"github.com/idemhq/idem/idemmem"
	"github.com/idemhq/idem/internal/redact"
)

// storeSpec is a --store URL, checked without connecting: open connects.
type storeSpec struct {
	kind   string // sqlite, postgres, redis, memory
	raw    string
	desc   string // for logs, without passwords
	path   string // sqlite
	redis  *redis.Options
	prefix string // redis key prefix (?prefix=), empty for idemredis.DefaultPrefix
	// cluster is redis-cluster://'s client options and WAIT settings.
	cluster *redisClusterSpec
	// maxBytes is the memory store's budget (?max_bytes=): 0 for idemmem's default,
	// negative for none.
	maxBytes int64
	// keepKeys makes the memory store remember its keys, so the admin API can list
	// them (serve --admin-token).
	keepKeys bool
}

// parseStore checks --store. Its errors are usage errors: they name the flag and the fix.
func parseStore(raw string) (storeSpec, error) {
	s := storeSpec{raw: raw, desc: redact.URL(raw)}
	if err := cli.CheckURL("--store", raw); err != nil {
		return s, err
	}
	switch {
	case raw == "memory:" || strings.HasPrefix(raw, "memory:?"):
		return parseMemoryStore(s)
	case strings.HasPrefix(raw, "sqlite:"):
		s.kind, s.path = "sqlite", strings.TrimPrefix(raw, "sqlite:")
		if s.path == "" {
			return s, errors.New("--store sqlite: needs a file path, such as sqlite:idem-gateway.db (created if missing)")
		}
		s.desc = "sqlite (" + strings.TrimPrefix(s.desc, "sqlite:") + ")"
	case strings.HasPrefix(raw, "postgres://"), strings.HasPrefix(raw, "postgresql://"):
		s.kind = "postgres"
		cfg, err := pgxpool.ParseConfig(raw)
		if err != nil {
			return s, fmt.Errorf("--store %s: %s: use postgres://user:pass@host:5432/db", s.desc, redact.String(err.Error()))
		}
		s.desc = fmt.Sprintf("postgres (%s:%d/%s)", cfg.ConnConfig.Host, cfg.ConnConfig.Port, cfg.ConnConfig.Database)
	case strings.HasPrefix(raw, "redis://"), strings.HasPrefix(raw, "rediss://"):
		return parseRedisStore(s)
	case strings.HasPrefix(raw, "redis-cluster://"):
		return parseRedisClusterStore(s)
	case strings.HasPrefix(raw, "mysql://"):
		return parseMySQLStore(s)
	default:
		return s, fmt.Errorf("--store %q: unknown store; use sqlite:PATH, postgres://user@host:5432/db, "+
			"mysql://user@host:3306/db, redis://host:6379[/db] or memory:", s.desc)
	}
	return s, nil
}

// parseMemoryStore checks --store memory:[?max_bytes=N].
func parseMemoryStore(s storeSpec) (storeSpec, error) {
	raw := s.raw
	s.kind = "memory"
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
	s.desc = "memory (lost on restart, not shared between gateways; at most " + budget + ")"
	return s, nil
}

// parseRedisStore checks --store redis://…[?prefix=P].
func parseRedisStore(s storeSpec) (storeSpec, error) {
	s.kind = "redis"
	// prefix is ours, not go-redis's: take it out before ParseURL, which refuses
	// options it does not know.
	u, err := url.Parse(s.raw)
	if err != nil { // checkURL refused it already
		return s, fmt.Errorf("--store %s: not a URL: use redis://host:6379[/db][?prefix=idem:]", s.desc)
	}
	q := u.Query()
	s.prefix = q.Get("prefix")
	q.Del("prefix")
	u.RawQuery = q.Encode()
	opts, err := redis.ParseURL(u.String())
	if err != nil {
		return s, fmt.Errorf("--store %s: %s: use redis://host:6379[/db][?prefix=idem:]", s.desc, redact.String(err.Error()))
	}
	s.redis = opts
	s.desc = fmt.Sprintf("redis (%s db %d)", opts.Addr, opts.DB)
	return s, nil
}
