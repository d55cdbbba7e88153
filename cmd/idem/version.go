package main

import (
	"context"
	"fmt"
	"runtime"
	"runtime/debug"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/idemhq/idem/internal/metrics"
)

// version is the release version a build stamps, as `make release` does:
//
//	go build -ldflags "-X main.version=v0.1.0" ./cmd/idem
//
// Unstamped, the version is the module's own (`go install …/cmd/idem@v0.1.0` records
// v0.1.0; a build in a git checkout, a pseudo-version from the VCS), or "devel".
var version string

// build describes the binary: what `idem version` prints, what /healthz names and
// what idem_build_info carries.
type build struct {
	Version   string // the release, or the module's version, or "devel"
	Revision  string // vcs.revision; empty when the build had no VCS information
	Time      string // vcs.time: the commit's time, RFC 3339
	Modified  bool   // vcs.modified: the working tree had uncommitted changes
	GoVersion string // the toolchain that built the binary
	Platform  string // GOOS/GOARCH
}

// readBuild reads the build of the running binary from runtime/debug.ReadBuildInfo,
// with stamped (main.version) taking precedence over the module's version.
func readBuild(stamped string) build {
	b := build{Version: stamped, GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return b.defaults()
	}
	b.GoVersion = info.GoVersion
	if b.Version == "" && info.Main.Version != "(devel)" {
		b.Version = info.Main.Version
	}
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			b.Revision = s.Value
		case "vcs.time":
			b.Time = s.Value
		case "vcs.modified":
			b.Modified, _ = strconv.ParseBool(s.Value)
		}
	}
	return b.defaults()
}

func (b build) defaults() build {
	if b.Version == "" {
		b.Version = "devel"
	}
	return b
}

// short is the line /healthz adds under its status: the version and, when known,
// the first 12 digits of the revision.
func (b build) short() string {
	s := "idem " + b.Version
	if b.Revision != "" {
		s += " (" + b.revision(12) + ")"
	}
	return s
}

// revision is the first n digits of the revision (all for n 0), "+dirty" when the
// tree was modified; empty when the build had no VCS information.
func (b build) revision(n int) string {
	r := b.Revision
	if n > 0 && len(r) > n {
		r = r[:n]
	}
	if r != "" && b.Modified {
		r += "+dirty"
	}
	return r
}

// binary is the build of this process, read once.
var binary = readBuild(version)

// runVersion prints the build: `idem version`, `idem --version`.
func (m *Main) runVersion(_ context.Context, args []string) error {
	fs := m.newFlagSet("version", `Print idem's version, the VCS revision and time it was built from, and the Go
version that built it. The first line is "idem <version>".`)
	if err := parse(fs, args); err != nil {
		return err
	}
	fmt.Fprintln(m.Stdout, "idem "+binary.Version)
	rev, when := "unknown (built without VCS information)", "unknown"
	if binary.Revision != "" {
		rev = binary.Revision
		if binary.Modified {
			rev += " (modified: uncommitted changes)"
		}
	}
	if binary.Time != "" {
		when = binary.Time
	}
	fmt.Fprintf(m.Stdout, "  revision  %s\n  commit    %s\n  go        %s %s\n", rev, when, binary.GoVersion, binary.Platform)
	return nil
}

// daemonRegistry is the registry of a daemon's /metrics: the Go runtime's and the
// process's collectors, and idem_build_info.
func daemonRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if err := metrics.NewBuild(reg, binary.Version, binary.revision(0), binary.GoVersion); err != nil {
		panic(err) // a fresh registry: only a programming error gets here
	}
	return reg
}
