package main

import (
	"encoding/base64"
	"io"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemhq/idem/cmd/idem/internal/cli"
	"github.com/idemhq/idem/idemhttp"
	"github.com/idemhq/idem/webhook"
)

// whDeliver posts a Standard Webhooks delivery of event id signed with key.
func whDeliver(t *testing.T, url string, key []byte, id, body string) reply {
	t.Helper()
	ts := strconv.FormatInt(time.Now().Unix(), 10)
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("webhook-id", id)
	req.Header.Set("webhook-timestamp", ts)
	req.Header.Set("webhook-signature", "v1,"+base64.StdEncoding.EncodeToString(webhook.Sign(key, []byte(id+"."+ts+"."+body))))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return reply{resp.StatusCode, resp.Header, b}
}

// Not parallel: the secret is in the process environment, as in production.
func TestServeWebhook(t *testing.T) {
	oldKey, newKey := []byte("the old endpoint secret, 32 byte"), []byte("the new endpoint secret, 32 byte")
	secrets := "whsec_" + base64.StdEncoding.EncodeToString(oldKey) + ", whsec_" + base64.StdEncoding.EncodeToString(newKey)
	t.Setenv(envWebhookSecret, secrets)
	up := newUpstream(t, nil, nil)
	g := startGateway(t, up.URL, "--webhook", "standard", "--store", "sqlite:"+filepath.Join(t.TempDir(), "gw.db"))
	url := "http://" + g.addr + "/hooks/billing"

	first := whDeliver(t, url, newKey, "msg_1", `{"type":"invoice.paid"}`)
	if first.status != http.StatusCreated {
		t.Fatalf("first delivery: %d %q\n%s", first.status, first.body, g.stderr)
	}
	// A retry signed with the old secret (a rotation in progress) is a replay.
	again := whDeliver(t, url, oldKey, "msg_1", `{"type":"invoice.paid"}`)
	if again.status != first.status || string(again.body) != string(first.body) || again.header.Get(idemhttp.HeaderReplayed) != "true" {
		t.Fatalf("retry: %d %q, want the replay of %d %q", again.status, again.body, first.status, first.body)
	}
	if n := up.callsOf("POST", "msg_1"); n != 1 {
		t.Fatalf("upstream ran %d times for msg_1, want 1", n)
	}

	// Forged: refused before the upstream or the store.
	if r := whDeliver(t, url, []byte("a forger's key"), "msg_2", "{}"); r.status != http.StatusBadRequest || !strings.Contains(string(r.body), webhook.ProblemVerification) {
		t.Fatalf("forged: %d %q, want 400", r.status, r.body)
	}
	if n := up.callsOf("POST", "msg_2"); n != 0 {
		t.Fatalf("a forged delivery reached the upstream %d times", n)
	}

	// Concurrent copies of one event, each retried until 2xx: one upstream call.
	var wg sync.WaitGroup
	for range 10 {
		wg.Go(func() {
			for {
				r := whDeliver(t, url, newKey, "msg_3", `{"n":3}`)
				if r.status < 300 {
					return
				}
				if r.status != http.StatusConflict {
					t.Errorf("concurrent copy: %d %q", r.status, r.body)
					return
				}
			}
		})
	}
	wg.Wait()
	if n := up.callsOf("POST", "msg_3"); n != 1 {
		t.Fatalf("upstream ran %d times for 10 concurrent copies, want 1", n)
	}
	g.stop(t)
	if out := g.stderr.String(); !strings.Contains(out, "verifying standard webhooks with 2 secret(s)") ||
		strings.Contains(out, base64.StdEncoding.EncodeToString(oldKey)) || strings.Contains(out, base64.StdEncoding.EncodeToString(newKey)) {
		t.Fatalf("stderr prints a secret or lacks the webhook line:\n%s", out)
	}
}

func TestServeWebhookFlagErrors(t *testing.T) {
	t.Parallel()
	const leak = "whsec_DO-NOT-PRINT!"
	for _, tc := range []struct {
		args   []string
		secret string
		want   string
	}{
		{[]string{"--webhook", "stripe"}, "", "needs the signing secret in $IDEM_WEBHOOK_SECRET"},
		{[]string{"--webhook", "stripe"}, " , ", "needs the signing secret"},
		{[]string{"--webhook", "paypal"}, "whsec_x", `--webhook "paypal"`},
		{[]string{"--webhook", "standard"}, leak, "webhook.Standard secret 1"},
		{[]string{"--webhook", "stripe"}, "sk_live_" + leak, "webhook.Stripe secret 1"},
		{[]string{"--webhook", "stripe", "--retention", "24h"}, "whsec_x", "shorter than stripe's retry horizon (72h0m0s)"},
		{[]string{"--webhook", "stripe", "--methods", "POST"}, "whsec_x", "--methods does not apply with --webhook"},
		{[]string{"--webhook", "github", "--store-5xx=false"}, "s", "--store-5xx does not apply"},
	} {
		m := NewMain(io.Discard, io.Discard)
		fs, o := m.serveFlags()
		if err := cli.Parse(fs, append([]string{"--upstream", "http://127.0.0.1:9"}, tc.args...)); err != nil {
			t.Fatal(err)
		}
		_, err := checkWebhook(fs, o, func(name string) (string, bool) {
			return tc.secret, name == envWebhookSecret && tc.secret != ""
		})
		if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "DO-NOT-PRINT") {
			t.Errorf("%q with secret %q: %v; want an error with %q that prints no secret", tc.args, tc.secret, err, tc.want)
		}
	}
	// Accepted: the default retention, or one beyond the horizon.
	for _, args := range [][]string{{"--webhook", "stripe"}, {"--webhook", "stripe", "--retention", "96h"}} {
		m := NewMain(io.Discard, io.Discard)
		fs, o := m.serveFlags()
		if err := cli.Parse(fs, append([]string{"--upstream", "http://127.0.0.1:9"}, args...)); err != nil {
			t.Fatal(err)
		}
		spec, err := checkWebhook(fs, o, func(string) (string, bool) { return "whsec_a,whsec_b", true })
		if err != nil || spec.secrets != 2 {
			t.Errorf("%q: %v", args, err)
		}
		if cfg := spec.config(o); (len(args) == 2) != (cfg.Retention == 0) {
			t.Errorf("%q: Retention %v", args, cfg.Retention)
		}
	}
}
