package main

import (
	"context"
	"fmt"
)

// serve is named in --help so the CLI's shape is visible; it is built by its own
// issue and until then says so plainly instead of pretending to run.

func (m *Main) runServe(ctx context.Context, args []string) error {
	return notYet("serve", "the HTTP idempotency gateway (issue #3)", args)
}

func notYet(name, what string, _ []string) error {
	return fmt.Errorf("idem %s: not available in this build: %s is not implemented yet; "+
		"the stores it will run on are (see README)", name, what)
}
