package main

import (
	"context"
	"fmt"
	"net/url"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemmysql"
)

// parseMySQLStore checks --store mysql://user:pass@host:3306/db[?param=…] without
// connecting.
func parseMySQLStore(s storeSpec) (storeSpec, error) {
	s.kind = "mysql"
	if _, err := idemmysql.DSN(s.raw); err != nil {
		return s, fmt.Errorf("--store %s: %w", s.desc, err)
	}
	if u, err := url.Parse(s.raw); err == nil {
		s.desc = fmt.Sprintf("mysql (%s%s)", u.Host, u.Path)
	}
	return s, nil
}

// openMySQLStore is serve's --store mysql://…: an idemmysql.Store on its own pool.
func openMySQLStore(ctx context.Context, s storeSpec, reg prometheus.Registerer) (idem.Store, func(), error) {
	st, err := idemmysql.Open(ctx, s.raw, idemmysql.Config{Registerer: reg})
	if err != nil {
		return nil, nil, fmt.Errorf("--store %s: %w", s.desc, err)
	}
	return st, func() { st.Close() }, nil
}
