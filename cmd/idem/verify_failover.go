package main

import (
	"context"
	"fmt"

	"github.com/idemhq/idem/cmd/idem/internal/verify"
	"github.com/idemhq/idem/internal/pgcluster"
	"github.com/idemhq/idem/internal/redact"
)

// verifyFailoverDB starts the replicated PostgreSQL of `idem verify --failover`,
// points o.db at its multi-host URL, and returns the failover for the flow and
// what stops the cluster. A --db of the user's is refused: the run kills its
// primary.
func (m *Main) verifyFailoverDB(ctx context.Context, o *verifyOptions) (*verify.Failover, func(), error) {
	if o.db != "" && o.db != "sqlite:" {
		return nil, nil, fmt.Errorf("--failover %s starts its own PostgreSQL (a primary and two standbys) and kills its primary: it cannot run on --db %s; leave --db out", o.failover, redact.URL(o.db))
	}
	fmt.Fprintf(m.Stderr, "idem verify: starting a private PostgreSQL primary with two %s standbys in a temporary directory\n", o.failover)
	c, err := pgcluster.StartReplicated(ctx, pgcluster.ReplicatedOptions{Sync: o.failover == "sync"})
	if err != nil {
		return nil, nil, fmt.Errorf("idem verify --failover: %w", err)
	}
	o.db = c.URL()
	fo := &verify.Failover{
		Mode: o.failover,
		Kill: c.KillPrimary,
		Promote: func(ctx context.Context) (string, error) {
			i, err := c.MostAdvanced(ctx)
			if err != nil {
				return "", err
			}
			if err := c.Promote(ctx, i); err != nil {
				return "", err
			}
			return c.Name(i), nil
		},
	}
	return fo, func() { _ = c.Stop(context.WithoutCancel(ctx)) }, nil
}
