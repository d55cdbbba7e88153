package main

import (
	"bytes"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/idemhq/idem/idemhttp"
)

// The gateway keyed by a JSON body field: a Stripe-style event posted twice, with
// no Idempotency-Key, reaches the upstream once and the retry is replayed.
func TestServeKeyJSONField(t *testing.T) {
	t.Parallel()
	up := newUpstream(t, nil, nil)
	g := startGateway(t, up.URL, "--store", "sqlite:"+filepath.Join(t.TempDir(), "gw.db"), "--key-json-field", "id", "--require-key")
	ev := `{"id":"evt_1","type":"charge.succeeded"}`
	first := send(t, "POST", "http://"+g.addr+"/stripe", "", ev)
	again := send(t, "POST", "http://"+g.addr+"/stripe", "", ev)
	if first.status != http.StatusCreated || !bytes.HasSuffix(first.body, []byte(ev)) {
		t.Fatalf("first delivery: %d %q, want 201 with the body the upstream read\n%s", first.status, first.body, g.stderr)
	}
	if again.status != first.status || !bytes.Equal(again.body, first.body) || again.header.Get(idemhttp.HeaderReplayed) != "true" {
		t.Errorf("retry: %d %q, want the first response replayed", again.status, again.body)
	}
	if n := up.callsOf("POST", ""); n != 1 {
		t.Errorf("upstream ran %d times, want once", n)
	}
	if r := send(t, "POST", "http://"+g.addr+"/stripe", "", `{"type":"charge.succeeded"}`); r.status != http.StatusBadRequest {
		t.Errorf("event without id under --require-key: %d, want 400", r.status)
	}
}

// Key sources that would repeat are refused naming the flags.
func TestServeKeySourceFlagErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--key-header", "webhook-id", "--key-json-field", "id"}, "--key-header and --key-json-field"},
		{[]string{"--key-json-field", "type"}, "--allow-common-key-field"},
		{[]string{"--key-header", "Webhook-Signature"}, "--key-header"},
	} {
		_, stderr, err := run(t, append([]string{"serve", "--upstream", "http://127.0.0.1:9", "--store", "memory:",
			"--listen", "127.0.0.1:0", "--admin-listen", ""}, tc.args...)...)
		if err == nil || !strings.Contains(err.Error()+stderr, tc.want) {
			t.Errorf("serve %q: err %v, stderr %q; want an error naming %s", tc.args, err, stderr, tc.want)
		}
	}
}
