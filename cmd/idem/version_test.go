package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem/cmd/idem/internal/cli"
	"github.com/idemhq/idem/internal/testsvc"
)

// `idem version` and `idem --version` print the same build, first line "idem <version>".
func TestVersionCommand(t *testing.T) {
	t.Parallel()
	run := func(args ...string) (string, error) {
		var out, errOut bytes.Buffer
		err := NewMain(&out, &errOut).Run(context.Background(), args)
		return out.String(), err
	}
	out, err := run("version")
	if err != nil {
		t.Fatalf("idem version: %v", err)
	}
	lines := strings.Split(out, "\n")
	if lines[0] != "idem "+cli.Binary.Version || cli.Binary.Version == "" {
		t.Errorf("idem version's first line = %q, want %q", lines[0], "idem "+cli.Binary.Version)
	}
	if !strings.Contains(out, "go        "+runtime.Version()+" "+runtime.GOOS+"/"+runtime.GOARCH) {
		t.Errorf("idem version does not name the Go version and platform:\n%s", out)
	}
	flagOut, err := run("--version")
	if err != nil || flagOut != out {
		t.Errorf("idem --version = %q, %v; want what idem version prints:\n%s", flagOut, err, out)
	}
	if _, err := run("version", "extra"); !errors.Is(err, cli.ErrUsage) {
		t.Errorf("idem version extra: %v, want a usage error", err)
	}
}

// Every daemon's /healthz keeps its status on the first line and names the build on
// the second, and its /metrics carries idem_build_info: serve, relay (polling and
// --cdc) and admin.
func TestDaemonsNameTheirBuild(t *testing.T) {
	t.Parallel()
	buildInfo := `idem_build_info{goversion="` + cli.Binary.GoVersion + `",revision="` + cli.Binary.Rev(0) +
		`",version="` + cli.Binary.Version + `"} 1`
	check := func(t *testing.T, base string) {
		t.Helper()
		var code int
		var body string
		testsvc.Eventually(t, time.Minute, "/healthz 200", func() bool {
			code, body = apiGet(t, base+"/healthz", "")
			return code == 200
		})
		if lines := strings.Split(strings.TrimSuffix(body, "\n"), "\n"); len(lines) != 2 || !strings.HasPrefix(lines[0], "ok") ||
			lines[1] != cli.Binary.Short() {
			t.Errorf("/healthz = %q, want the status then %q", body, cli.Binary.Short())
		}
		if code, body = apiGet(t, base+"/metrics", ""); code != 200 || !strings.Contains(body, buildInfo+"\n") {
			t.Errorf("/metrics: %d, want %s in\n%s", code, buildInfo, body)
		}
	}
	t.Run("serve", func(t *testing.T) {
		t.Parallel()
		g := startGateway(t, keyedUpstream(t), "--store", "sqlite:"+filepath.Join(t.TempDir(), "gw.db"))
		check(t, "http://"+g.admin)
	})
	t.Run("admin", func(t *testing.T) {
		t.Parallel()
		_, addrs := startDaemon(t, adminListeningRE, "admin", "--listen", "127.0.0.1:0", "--insecure",
			"--store", "sqlite:"+filepath.Join(t.TempDir(), "gw.db"))
		check(t, "http://"+addrs[0])
	})
	t.Run("relay", func(t *testing.T) {
		t.Parallel()
		path, _, _ := sqliteOutbox(t, testsvc.UniqueName("build.")+".orders")
		r := startRelay(t, "--db", "sqlite:"+path, "--sink", natsURL(), "--poll", "50ms")
		check(t, "http://"+r.addr)
	})
	t.Run("relay --cdc", func(t *testing.T) {
		t.Parallel()
		f := newCDCFixture(t)
		r := startRelay(t, "--cdc", "--db", f.url, "--sink", natsURL(), "--slot", "build_slot")
		check(t, "http://"+r.addr)
	})
}

// `go install ./cmd/idem` into an empty GOBIN gives a binary that runs and names its
// build, and `make release`'s stamp (-ldflags -X main.version=…) is what it reports.
func TestInstalledBinaryReportsVersion(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary twice")
	}
	t.Parallel()
	gobin := t.TempDir()
	goCmd := func(args ...string) {
		t.Helper()
		cmd := exec.Command("go", args...)
		cmd.Env = append(os.Environ(), "GOBIN="+gobin)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	firstLine := func(bin string, args ...string) string {
		t.Helper()
		out, err := exec.Command(bin, args...).Output()
		if err != nil {
			t.Fatalf("%s %s: %v", bin, strings.Join(args, " "), err)
		}
		return strings.SplitN(string(out), "\n", 2)[0]
	}
	goCmd("install", ".")
	installed := filepath.Join(gobin, "idem")
	if got := firstLine(installed, "version"); !strings.HasPrefix(got, "idem ") || got == "idem " {
		t.Errorf("installed idem version = %q, want idem <version>", got)
	}
	stamped := filepath.Join(gobin, "idem-stamped")
	goCmd("build", "-ldflags", "-X main.version=v0.0.0-stamped", "-o", stamped, ".")
	if got := firstLine(stamped, "--version"); got != "idem v0.0.0-stamped" {
		t.Errorf("stamped idem --version = %q, want idem v0.0.0-stamped", got)
	}
}
