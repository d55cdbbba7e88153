package main

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/cmd/idem/internal/cli"
	"github.com/idemhq/idem/idemhttp"
	"github.com/idemhq/idem/idemkey"
)

// sendWith posts body with key and extra headers ("Name: value").
func sendWith(t *testing.T, rawURL, key string, headers ...string) reply {
	t.Helper()
	req, err := http.NewRequest("POST", rawURL, strings.NewReader("pay 5"))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set(idemhttp.HeaderKey, key)
	for _, h := range headers {
		name, value, _ := strings.Cut(h, ": ")
		req.Header.Set(name, value)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return reply{resp.StatusCode, resp.Header, b}
}

// The gateway refuses a key older than --key-max-age (410), a request past its
// Idem-Deadline (412) and, with --require-timed-keys, an untimed key (400), without
// calling the upstream, and counts each refusal by reason on /metrics.
func TestServeRefusesLateRequests(t *testing.T) {
	t.Parallel()
	up := newUpstream(t, nil, nil)
	g := startGateway(t, up.URL, "--store", "memory:", "--key-max-age", "1h", "--require-timed-keys")
	base := "http://" + g.addr + "/orders"
	old := (&idemkey.Generator{Now: func() time.Time { return time.Now().Add(-2 * time.Hour) }}).V7()
	for _, tc := range []struct {
		key     string
		headers []string
		status  int
		problem string
	}{
		{old, nil, http.StatusGone, idemhttp.ProblemKeyExpired},
		{idemkey.NewV4(), nil, http.StatusBadRequest, idemhttp.ProblemUntimedKey},
		{idemkey.NewV7(), []string{idem.HeaderDeadline + ": " + idem.FormatDeadline(time.Now().Add(-time.Second))}, http.StatusPreconditionFailed, idemhttp.ProblemDeadlinePassed},
	} {
		r := sendWith(t, base, tc.key, tc.headers...)
		if r.status != tc.status || !bytes.Contains(r.body, []byte(tc.problem)) {
			t.Errorf("key %s %v: %d %s; want %d %s", tc.key, tc.headers, r.status, r.body, tc.status, tc.problem)
		}
		if n := up.callsOf("POST", tc.key); n != 0 {
			t.Errorf("the upstream ran %d times for a refused request", n)
		}
	}
	fresh := idemkey.NewV7()
	if r := sendWith(t, base, fresh, idem.HeaderDeadline+": "+idem.FormatDeadline(time.Now().Add(time.Minute))); r.status != http.StatusCreated {
		t.Fatalf("a fresh key before its deadline: %d %s", r.status, r.body)
	}
	m := send(t, "GET", "http://"+g.admin+"/metrics", "", "")
	for _, want := range []string{`idem_http_refused_total{reason="stale_key"} 1`, `idem_http_refused_total{reason="untimed_key"} 1`,
		`idem_http_refused_total{reason="deadline"} 1`, `idem_http_refused_total{reason="future_key"} 0`} {
		if !bytes.Contains(m.body, []byte(want)) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	g.stop(t)
}

// --key-max-age and --require-timed-keys (and their $IDEM_ variables) reach the
// middleware; contradictory values are usage errors naming the flags.
func TestServeKeyAgeFlags(t *testing.T) {
	t.Parallel()
	env := map[string]string{"IDEM_REQUIRE_TIMED_KEYS": "true"}
	fs, o := NewMain(io.Discard, io.Discard).serveFlags()
	if err := fs.Parse([]string{"--upstream", "http://u", "--store", "memory:", "--key-max-age", "90m"}); err != nil {
		t.Fatal(err)
	}
	if err := cli.ApplyEnv(fs, func(k string) (string, bool) { v, ok := env[k]; return v, ok }); err != nil {
		t.Fatal(err)
	}
	spec, err := o.check()
	if err != nil {
		t.Fatal(err)
	}
	if spec.cfg.MaxKeyAge != 90*time.Minute || !spec.cfg.RequireTimedKeys {
		t.Fatalf("config MaxKeyAge %v RequireTimedKeys %v; want 1h30m from the flag and true from $IDEM_REQUIRE_TIMED_KEYS",
			spec.cfg.MaxKeyAge, spec.cfg.RequireTimedKeys)
	}
	_, stderr, err := run(t, "serve", "--upstream", "http://127.0.0.1:1", "--key-max-age", "-1s", "--require-timed-keys")
	if !errors.Is(err, cli.ErrUsage) || !strings.Contains(stderr, "--require-timed-keys") || !strings.Contains(stderr, "--key-max-age") {
		t.Errorf("contradictory flags: %v %q; want a usage error naming both", err, stderr)
	}
	stdout, stderr, _ := run(t, "serve", "--help")
	for _, want := range []string{"-key-max-age", "-require-timed-keys", "410", "412"} {
		if !strings.Contains(stdout+stderr, want) {
			t.Errorf("serve --help lacks %q", want)
		}
	}
}
