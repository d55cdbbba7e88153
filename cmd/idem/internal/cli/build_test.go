package cli

import (
	"runtime"
	"testing"
)

// A version stamped by the build (-ldflags -X main.version=…) wins over the module's;
// without one and without a module version, the build is "devel".
func TestReadBuild(t *testing.T) {
	t.Parallel()
	if b := ReadBuild("v1.2.3"); b.Version != "v1.2.3" || b.GoVersion != runtime.Version() {
		t.Errorf("ReadBuild(v1.2.3) = %+v, want version v1.2.3 built by %s", b, runtime.Version())
	}
	if b := ReadBuild(""); b.Version == "" {
		t.Errorf("ReadBuild(\"\") = %+v, want a version (the module's, or devel)", b)
	}
	b := Build{Version: "v0.1.0", Revision: "4d11fda582a4642cd9a0f69a542015f9456ff1f8", Modified: true}
	if got, want := b.Short(), "idem v0.1.0 (4d11fda582a4+dirty)"; got != want {
		t.Errorf("Short() = %q, want %q", got, want)
	}
	if got, want := b.Rev(0), "4d11fda582a4642cd9a0f69a542015f9456ff1f8+dirty"; got != want {
		t.Errorf("Rev(0) = %q, want %q", got, want)
	}
	if got, want := (Build{Version: "devel"}).Short(), "idem devel"; got != want {
		t.Errorf("Short() without VCS information = %q, want %q", got, want)
	}
}
