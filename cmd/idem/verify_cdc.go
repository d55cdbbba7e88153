package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/idemhq/idem/cmd/idem/internal/open"
	"github.com/idemhq/idem/cmd/idem/internal/verify"
	"github.com/idemhq/idem/idempg/pgcdc"
	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/internal/pgcluster"
	"github.com/idemhq/idem/internal/redact"
	"github.com/idemhq/idem/outbox"
)

// verifyCDCDB picks the database of `idem verify --relay cdc`: without --db a
// private PostgreSQL with wal_level=logical in a temporary directory (so it runs on
// a fresh machine like the default verify), else the --db server, which must be
// PostgreSQL. It returns what stops the private server.
func (m *Main) verifyCDCDB(ctx context.Context, o *verifyOptions) (stop func(), err error) {
	switch {
	case o.db == "" || o.db == "sqlite:":
		fmt.Fprintln(m.Stderr, "idem verify: starting a private PostgreSQL (wal_level=logical) in a temporary directory")
		c, err := pgcluster.Start(ctx, pgcluster.Options{})
		if err != nil {
			return nil, fmt.Errorf("idem verify --relay cdc: %w", err)
		}
		o.db = c.URL
		return func() { _ = c.Stop(context.WithoutCancel(ctx)) }, nil
	case open.DialectOf(o.db) != "postgres":
		return nil, fmt.Errorf("--relay cdc reads PostgreSQL's WAL: pass --db postgres://… (a server with wal_level=logical), or no --db for a private one (got %s)", redact.URL(o.db))
	}
	return func() {}, nil
}

// setupVerifyCDC creates the outbox, its publication and the slot before the first
// order, points flow at them, and returns what drops them.
func setupVerifyCDC(ctx context.Context, flow *verify.Flow, raw string) (done func(), err error) {
	var schema string
	if err := flow.DB.QueryRowContext(ctx, "SELECT current_schema()").Scan(&schema); err != nil {
		return nil, err
	}
	txdb, err := idemsql.SQLDB(ctx, flow.DB)
	if err != nil {
		return nil, err
	}
	if _, err := outbox.New(ctx, txdb, outbox.Config{}); err != nil {
		return nil, err
	}
	u, err := url.Parse(raw)
	if err != nil {
		return nil, errors.New(redact.String(err.Error()))
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	name := strings.TrimPrefix(schema, "idem_verify_")
	cfg := pgcdc.Config{Slot: "idem_verify_" + name, Publication: "idem_verify_" + name, Table: schema + ".idem_outbox"}
	r, err := pgcdc.New(u.String(), nopSink{}, cfg)
	if err != nil {
		return nil, err
	}
	if err := r.Setup(ctx); err != nil {
		return nil, fmt.Errorf("idem verify --relay cdc: %s", redact.String(err.Error()))
	}
	flow.CDC = &verify.CDC{URL: u.String(), Config: cfg}
	return func() {
		ctx := context.WithoutCancel(ctx)
		_ = r.DropSlot(ctx)
		if conn, err := pgx.Connect(ctx, u.String()); err == nil {
			_, _ = conn.Exec(ctx, "DROP PUBLICATION IF EXISTS "+cfg.Publication)
			conn.Close(ctx)
		}
	}, nil
}
