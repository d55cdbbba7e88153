package testsvc

import (
	"net/url"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// JetStream connects to the NATS server at natsURL (skipping, or failing under
// IDEM_REQUIRE_SERVICES=1, when it is down) and returns its JetStream context; the
// connection closes when t ends.
func JetStream(t testing.TB, natsURL string) jetstream.JetStream {
	t.Helper()
	u, err := url.Parse(natsURL)
	if err != nil {
		t.Fatalf("NATS URL %q: %v", natsURL, err)
	}
	Reach(t, "nats", u.Host)
	nc, err := nats.Connect(natsURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}
