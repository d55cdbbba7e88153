package audit

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Deliveries tells the audit how many deliveries each consumer processed and how
// many it dropped as duplicates, by consumer name: the counters
// idem_inbox_messages_total{consumer, outcome="processed"|"duplicate"} of its
// processes, added up.
type Deliveries interface {
	Deliveries(ctx context.Context) (map[string]Delivered, error)
}

// DeliveriesFunc adapts a function to Deliveries.
type DeliveriesFunc func(ctx context.Context) (map[string]Delivered, error)

// Deliveries calls f.
func (f DeliveriesFunc) Deliveries(ctx context.Context) (map[string]Delivered, error) { return f(ctx) }

// GatherDeliveries reads the consumers' counts from g: the registry of the
// process the consumers run in.
func GatherDeliveries(g prometheus.Gatherer) Deliveries {
	return DeliveriesFunc(func(context.Context) (map[string]Delivered, error) {
		fams, err := g.Gather()
		out := map[string]Delivered{}
		for _, f := range fams {
			add(out, f)
		}
		return out, err
	})
}

// Bounds of ScrapeDeliveries.
const (
	// MaxScrapeBytes bounds one /metrics answer.
	MaxScrapeBytes = 4 << 20
	// ScrapeTimeout bounds one read of a source.
	ScrapeTimeout = 5 * time.Second
)

// ScrapeDeliveries reads the consumers' counts from the /metrics endpoints of
// their processes (the Prometheus text format), each read bounded by
// ScrapeTimeout and MaxScrapeBytes, and adds them up. A source that does not
// answer makes the whole reading an error: a partial count would understate
// the duplicate rate. client nil means http.DefaultClient.
func ScrapeDeliveries(client *http.Client, urls ...string) Deliveries {
	if client == nil {
		client = http.DefaultClient
	}
	return DeliveriesFunc(func(ctx context.Context) (map[string]Delivered, error) {
		out := map[string]Delivered{}
		var errs []error
		for _, u := range urls {
			if err := scrape(ctx, client, u, out); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", u, err))
			}
		}
		return out, errors.Join(errs...)
	})
}

func scrape(ctx context.Context, client *http.Client, url string, out map[string]Delivered) error {
	ctx, cancel := context.WithTimeout(ctx, ScrapeTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "text/plain; version=0.0.4")
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("answered %s", resp.Status)
	}
	body := io.LimitReader(resp.Body, MaxScrapeBytes+1)
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(&limited{r: body, left: MaxScrapeBytes})
	if err != nil {
		return err
	}
	for _, f := range fams {
		add(out, f)
	}
	return nil
}

// limited fails a read past its bound instead of ending it quietly, so that a
// cut answer is an error, not a smaller count.
type limited struct {
	r    io.Reader
	left int64
}

func (l *limited) Read(p []byte) (int, error) {
	n, err := l.r.Read(p)
	if l.left -= int64(n); l.left < 0 {
		return n, fmt.Errorf("the answer is longer than %d bytes", MaxScrapeBytes)
	}
	return n, err
}

func add(out map[string]Delivered, f *dto.MetricFamily) {
	if f.GetName() != "idem_inbox_messages_total" {
		return
	}
	for _, m := range f.GetMetric() {
		var consumer, outcome string
		for _, l := range m.GetLabel() {
			switch l.GetName() {
			case "consumer":
				consumer = l.GetValue()
			case "outcome":
				outcome = l.GetValue()
			}
		}
		v := int64(m.GetCounter().GetValue())
		d := out[consumer]
		switch outcome {
		case "processed":
			d.Processed += v
		case "duplicate":
			d.Duplicates += v
		default:
			continue
		}
		out[consumer] = d
	}
}
