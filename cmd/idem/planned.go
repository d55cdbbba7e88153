package main

import (
	"context"
	"fmt"
)

// serve and relay are named in --help so the CLI's shape is visible; they are built
// by their own issues and until then say so plainly instead of pretending to run.

func (m *Main) runServe(ctx context.Context, args []string) error {
	return notYet("serve", "the HTTP idempotency gateway (issue #3)", args)
}

func (m *Main) runRelay(ctx context.Context, args []string) error {
	return notYet("relay", "the outbox relay (issue #5)", args)
}

func notYet(name, what string, _ []string) error {
	return fmt.Errorf("idem %s: not available in this build: %s is not implemented yet; "+
		"the stores it will run on are (see README)", name, what)
}
