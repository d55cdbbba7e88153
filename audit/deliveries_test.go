package audit_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/idemhq/idem/audit"
)

const scraped = `# HELP idem_inbox_messages_total Messages the inbox handled.
# TYPE idem_inbox_messages_total counter
idem_inbox_messages_total{consumer="ledger",outcome="processed"} 90
idem_inbox_messages_total{consumer="ledger",outcome="duplicate"} 10
idem_inbox_messages_total{consumer="ledger",outcome="dead_lettered"} 3
idem_inbox_messages_total{consumer="mail",outcome="processed"} 7
# TYPE other_total counter
other_total{consumer="ledger",outcome="duplicate"} 1000
`

func TestScrapeDeliveries(t *testing.T) {
	t.Parallel()
	ok := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		io.WriteString(w, scraped)
	}))
	defer ok.Close()
	// Two processes of the same consumers: their counts add up.
	got, err := audit.ScrapeDeliveries(nil, ok.URL, ok.URL).Deliveries(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if got["ledger"] != (audit.Delivered{Processed: 180, Duplicates: 20}) || got["mail"] != (audit.Delivered{Processed: 14}) || len(got) != 2 {
		t.Errorf("scraped %+v, want ledger 180 processed, 20 duplicates; mail 14 processed", got)
	}

	failing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "down", http.StatusInternalServerError)
	}))
	defer failing.Close()
	if _, err := audit.ScrapeDeliveries(nil, ok.URL, failing.URL).Deliveries(context.Background()); err == nil || !strings.Contains(err.Error(), "500") {
		t.Errorf("a source answering 500: got %v, want an error naming the status", err)
	}

	huge := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, scraped)
		line := "# " + strings.Repeat("x", 1<<16) + "\n"
		for n := 0; n <= audit.MaxScrapeBytes; n += len(line) {
			if _, err := io.WriteString(w, line); err != nil {
				return
			}
		}
	}))
	defer huge.Close()
	if _, err := audit.ScrapeDeliveries(nil, huge.URL).Deliveries(context.Background()); err == nil || !strings.Contains(err.Error(), "longer than") {
		t.Errorf("an answer over MaxScrapeBytes: got %v, want an error", err)
	}

	garbled := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "idem_inbox_messages_total{consumer=\"ledger\" 12\n")
	}))
	defer garbled.Close()
	if _, err := audit.ScrapeDeliveries(nil, garbled.URL).Deliveries(context.Background()); err == nil {
		t.Error("a garbled answer: got no error")
	}
}

// bodyClient answers every request with body, without a network.
type bodyClient []byte

func (b bodyClient) RoundTrip(r *http.Request) (*http.Response, error) {
	return &http.Response{StatusCode: http.StatusOK, Status: "200 OK", Body: io.NopCloser(strings.NewReader(string(b))), Request: r}, nil
}

// FuzzScrapeDeliveries: whatever a /metrics endpoint answers, the scrape
// returns counts or an error, and never panics.
func FuzzScrapeDeliveries(f *testing.F) {
	f.Add([]byte(scraped))
	f.Add([]byte("idem_inbox_messages_total{consumer=\"a\",outcome=\"processed\"} 1e300\n"))
	f.Add([]byte("idem_inbox_messages_total{consumer=\"a\",outcome=\"duplicate\"} NaN\n"))
	f.Add([]byte("# TYPE idem_inbox_messages_total gauge\nidem_inbox_messages_total{outcome=\"processed\"} -4\n"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, body []byte) {
		d := audit.ScrapeDeliveries(&http.Client{Transport: bodyClient(body)}, "http://consumer/metrics")
		got, err := d.Deliveries(context.Background())
		if err == nil && got == nil {
			t.Fatal("no error and no counts")
		}
	})
}
