// Package operator is idem's operator commands: keys, dlq, outbox and sagas, the
// operations of the admin API from a shell. They share their action dispatch,
// exit codes and output (ops.go: a table, or one JSON document with --json); what
// they show of a record is the operator view, package admin/view, which the admin
// API and the console show too.
package operator

import (
	"flag"
	"io"

	"github.com/idemhq/idem/cmd/idem/internal/cli"
	"github.com/idemhq/idem/idemhttp"
)

// Cmd runs the operator commands on a command line's streams.
type Cmd struct {
	Stdout, Stderr io.Writer
	// Help is where usage texts go: Stderr before its redaction (a redactor
	// would mask "user:pw@" in an example). Nil: Stderr.
	Help io.Writer
	// ServeScope checks serve's scope flags as serve does and returns the
	// middleware's configuration of them (keys scope prints the scope serve
	// would give a request). Serve's flag checks are the command line's: it
	// sets this.
	ServeScope func(ScopeFlags) (idemhttp.Config, error)
}

// ScopeFlags are serve's flags that choose the scope of a request's keys, as
// `idem keys scope` takes them.
type ScopeFlags struct {
	Header                               string // --scope-header
	Trust                                bool   // --trust-scope-header
	CredentialHeaders, CredentialCookies string // --credential-headers, --credential-cookies
}

// help is where usage texts go.
func (m *Cmd) help() io.Writer {
	if m.Help != nil {
		return m.Help
	}
	return m.Stderr
}

// printFlags writes fs's flags and their defaults, redacted, to m.help().
func (m *Cmd) printFlags(fs *flag.FlagSet) { cli.PrintFlags(fs, m.help()) }

// newFlagSet returns a flag set for a command that reports errors on m.Stderr and
// its usage (--help) on m.help().
func (m *Cmd) newFlagSet(name, synopsis string) *flag.FlagSet {
	return cli.NewFlagSet(name, synopsis, m.Stderr, m.help())
}
