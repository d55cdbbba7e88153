package main

import (
	"context"
	"fmt"

	"github.com/idemhq/idem/cmd/idem/internal/cli"
)

// version is the release version a build stamps, as `make release` does:
//
//	go build -ldflags "-X main.version=v0.1.0" ./cmd/idem
//
// Unstamped, the version is the module's own (`go install …/cmd/idem@v0.1.0` records
// v0.1.0; a build in a git checkout, a pseudo-version from the VCS), or "devel".
var version string

// The stamp reaches the build that idem version prints, /healthz names and
// idem_build_info carries.
func init() { cli.Binary = cli.ReadBuild(version) }

// runVersion prints the build: `idem version`, `idem --version`.
func (m *Main) runVersion(_ context.Context, args []string) error {
	fs := m.newFlagSet("version", `Print idem's version, the VCS revision and time it was built from, and the Go
version that built it. The first line is "idem <version>".`)
	if err := cli.Parse(fs, args); err != nil {
		return err
	}
	fmt.Fprintln(m.Stdout, "idem "+cli.Binary.Version)
	rev, when := "unknown (built without VCS information)", "unknown"
	if cli.Binary.Revision != "" {
		rev = cli.Binary.Revision
		if cli.Binary.Modified {
			rev += " (modified: uncommitted changes)"
		}
	}
	if cli.Binary.Time != "" {
		when = cli.Binary.Time
	}
	fmt.Fprintf(m.Stdout, "  revision  %s\n  commit    %s\n  go        %s %s\n", rev, when, cli.Binary.GoVersion, cli.Binary.Platform)
	return nil
}
