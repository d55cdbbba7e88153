package cli

import (
	"runtime"
	"runtime/debug"
	"strconv"
)

// Build describes the binary: what `idem version` prints, what /healthz names and
// what idem_build_info carries.
type Build struct {
	Version   string // the release, or the module's version, or "devel"
	Revision  string // vcs.revision; empty when the Build had no VCS information
	Time      string // vcs.time: the commit's time, RFC 3339
	Modified  bool   // vcs.modified: the working tree had uncommitted changes
	GoVersion string // the toolchain that built the binary
	Platform  string // GOOS/GOARCH
}

// ReadBuild reads the Build of the running binary from runtime/debug.ReadBuildInfo,
// with stamped (main.version) taking precedence over the module's version.
func ReadBuild(stamped string) Build {
	b := Build{Version: stamped, GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
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

func (b Build) defaults() Build {
	if b.Version == "" {
		b.Version = "devel"
	}
	return b
}

// Short is the line /healthz adds under its status: the version and, when known,
// the first 12 digits of the revision.
func (b Build) Short() string {
	s := "idem " + b.Version
	if b.Revision != "" {
		s += " (" + b.Rev(12) + ")"
	}
	return s
}

// Rev is the first n digits of the revision (all for n 0), "+dirty" when the
// tree was modified; empty when the Build had no VCS information.
func (b Build) Rev(n int) string {
	r := b.Revision
	if n > 0 && len(r) > n {
		r = r[:n]
	}
	if r != "" && b.Modified {
		r += "+dirty"
	}
	return r
}

// Binary is the Build of this process, read once.
var Binary = ReadBuild("")
