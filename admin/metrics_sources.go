package admin

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"sync"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/admin/view"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Bounds of MetricsSources.
const (
	// MaxMetricsSources bounds MetricsSources.URLs.
	MaxMetricsSources = 32
	// DefaultScrapeTimeout bounds a read of one source when Timeout is 0.
	DefaultScrapeTimeout = 2 * time.Second
	// DefaultScrapeMaxBytes bounds a source's answer when MaxBytes is 0.
	DefaultScrapeMaxBytes = 4 << 20
	// DefaultScrapeEvery is how long a reading of the sources is reused when Every
	// is 0: the console polls every 2 seconds.
	DefaultScrapeEvery = time.Second
)

// MetricsSources are the /metrics endpoints (the Prometheus text format) of the
// processes an admin API operates, such as idem relay's and idem serve's: GET
// /api/metrics adds up their idem_* metrics with Config.Gatherer's, and lists each
// source as up or down, so that a figure no source exports is told apart from a
// source that did not answer.
type MetricsSources struct {
	// URLs are http:// or https:// addresses without credentials, at most
	// MaxMetricsSources.
	URLs []string
	// Timeout bounds each read of a source (0: DefaultScrapeTimeout).
	Timeout time.Duration
	// MaxBytes bounds a source's answer; a larger one counts as down (0:
	// DefaultScrapeMaxBytes).
	MaxBytes int64
	// Every is how long a reading of the sources answers GET /api/metrics before
	// they are read again, however many consoles poll (0: DefaultScrapeEvery).
	Every time.Duration
	// Client sends the requests (nil: a client that follows no redirect).
	Client *http.Client
}

// MetricSource is a source's state in a MetricsSummary.
type MetricSource struct {
	URL string `json:"url"`
	// Up: the source answered in time, within MaxBytes, in the text format.
	Up bool `json:"up"`
	// Error says why it is down.
	Error string `json:"error,omitempty"`
	// Families is the number of idem_* families it exported.
	Families int `json:"families"`
}

// localSource names Config.Gatherer in MetricSummary.From.
const localSource = "local"

func (m *MetricsSources) check() error {
	field := "Config.Metrics.URLs"
	if len(m.URLs) > MaxMetricsSources {
		return &idem.InputError{Field: field, Reason: fmt.Sprintf("has %d sources, more than %d", len(m.URLs), MaxMetricsSources),
			Fix: "point at a Prometheus server's federation endpoint instead, or read fewer processes"}
	}
	for _, raw := range m.URLs {
		u, err := url.Parse(raw)
		switch {
		case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
			return &idem.InputError{Field: field, Reason: fmt.Sprintf("has %q, not an http:// or https:// URL", view.Clean(raw, 255)),
				Fix: "use the process's /metrics address, e.g. http://127.0.0.1:9464/metrics (idem relay's --listen)"}
		case u.User != nil:
			return &idem.InputError{Field: field, Reason: "has a URL with credentials (user:password@)",
				Fix: "the URLs are shown to readers of GET /api/metrics: serve /metrics without credentials on a private address"}
		}
	}
	switch {
	case m.Timeout < 0:
		return &idem.InputError{Field: "Config.Metrics.Timeout", Reason: "is negative", Fix: "use a positive duration, or 0 for 2s"}
	case m.MaxBytes < 0:
		return &idem.InputError{Field: "Config.Metrics.MaxBytes", Reason: "is negative", Fix: "use a positive size, or 0 for 4 MiB"}
	case m.Every < 0:
		return &idem.InputError{Field: "Config.Metrics.Every", Reason: "is negative", Fix: "use a positive duration, or 0 for 1s"}
	}
	return nil
}

// scraper reads the sources of a MetricsSources, at most once per Every.
type scraper struct {
	cfg MetricsSources

	mu   sync.Mutex // held while reading: concurrent polls wait for one reading
	at   time.Time
	last []scraped
}

type scraped struct {
	src MetricSource
	mfs map[string]*dto.MetricFamily
}

func newScraper(m MetricsSources) *scraper {
	m.URLs = slices.Clone(m.URLs)
	if m.Timeout == 0 {
		m.Timeout = DefaultScrapeTimeout
	}
	if m.MaxBytes == 0 {
		m.MaxBytes = DefaultScrapeMaxBytes
	}
	if m.Every == 0 {
		m.Every = DefaultScrapeEvery
	}
	if m.Client == nil {
		m.Client = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	}
	return &scraper{cfg: m}
}

// read returns the sources' last reading, reading them again if it is older than
// Every. A reading is not cut short by the request that started it.
func (s *scraper) read(ctx context.Context, now time.Time) []scraped {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.last != nil && now.Sub(s.at) < s.cfg.Every {
		return s.last
	}
	ctx = context.WithoutCancel(ctx)
	out := make([]scraped, len(s.cfg.URLs))
	var wg sync.WaitGroup
	for i, u := range s.cfg.URLs {
		wg.Go(func() {
			mfs, err := s.scrape(ctx, u)
			out[i] = scraped{src: MetricSource{URL: u, Up: err == nil, Families: len(mfs)}, mfs: mfs}
			if err != nil {
				out[i].src.Error = view.Clean(err.Error(), 240)
			}
		})
	}
	wg.Wait()
	s.at, s.last = now, out
	return out
}

// scrape reads the idem_* families of one source.
func (s *scraper) scrape(ctx context.Context, u string) (map[string]*dto.MetricFamily, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", u, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "text/plain;version=0.0.4")
	resp, err := s.cfg.Client.Do(req)
	if err != nil {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return nil, fmt.Errorf("no answer within %s", s.cfg.Timeout)
		}
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("answered %s", resp.Status)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, s.cfg.MaxBytes+1))
	if err != nil {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return nil, fmt.Errorf("answer not read within %s", s.cfg.Timeout)
		}
		return nil, err
	}
	if int64(len(body)) > s.cfg.MaxBytes {
		return nil, fmt.Errorf("answer larger than %d bytes", s.cfg.MaxBytes)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("not the Prometheus text format: %w", err)
	}
	for name := range mfs {
		if !isIdemMetric(name) || !model.LegacyValidation.IsValidMetricName(name) { // idem's names are legacy ones
			delete(mfs, name)
		}
	}
	return mfs, nil
}
