package main

import (
	"flag"

	"github.com/idemhq/idem/cmd/idem/internal/cli"
	"github.com/idemhq/idem/internal/redact"
)

// The names the operator commands (ops.go, dlq.go, outboxcmd.go, sagas*.go,
// keys*.go) and their tests call, from before the shared kit moved to package
// cli: each is that package's, under its old name. Calling cli directly lets
// this file go.
var (
	errUsage    = cli.ErrUsage
	didYouMean  = cli.DidYouMean
	fileProblem = cli.FileProblem
	redactURL   = redact.URL
)

func parse(fs *flag.FlagSet, args []string) error { return cli.Parse(fs, args) }
