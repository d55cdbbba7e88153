package admin

import (
	"maps"
	"math"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/idemhq/idem/admin/view"
	dto "github.com/prometheus/client_model/go"
)

// Bounds of GET /api/metrics, whatever the Gatherer holds.
const (
	// MaxMetricFamilies bounds the idem_* families a summary lists.
	MaxMetricFamilies = 256
	// MaxMetricOutcomes bounds the outcome values listed per family; the rest are
	// added up under "other".
	MaxMetricOutcomes = 32
)

// metricPrefix selects the families a summary shows: idem's own.
const metricPrefix = "idem_"

// MetricsSummary is the answer to GET /api/metrics: the current value of each idem_*
// metric of Config.Gatherer and of the Config.Metrics sources, summed over its
// labels and its sources. A console polls it and computes rates from two
// summaries (Δvalue / Δtime).
type MetricsSummary struct {
	// Time is when the metrics were gathered.
	Time    time.Time                `json:"time"`
	Metrics map[string]MetricSummary `json:"metrics"`
	// Sources lists the Config.Metrics sources, up or down: [] for a Config.Metrics
	// without URLs, null without Config.Metrics (the figures are then this
	// process's own).
	Sources []MetricSource `json:"sources"`
}

// MetricSummary is one metric family summed over its series.
type MetricSummary struct {
	// Type is counter, gauge, histogram, summary or untyped.
	Type string `json:"type"`
	// Value is the sum of the series' values; for a histogram or a summary, the sum
	// of their sample counts. Series whose value is NaN or infinite are left out.
	Value float64 `json:"value"`
	// Sum is, for a histogram or a summary, the sum of the observations (Sum/Value
	// is their mean).
	Sum float64 `json:"sum,omitempty"`
	// ByOutcome splits Value by the "outcome" label, for families that have one
	// (idem_claims_total, idem_http_requests_total, idem_inbox_messages_total).
	ByOutcome map[string]float64 `json:"by_outcome,omitempty"`
	// From names where the figure comes from, with Config.Metrics: the URLs of the
	// sources that export it, and "local" for Config.Gatherer.
	From []string `json:"from,omitempty"`
}

func isIdemMetric(name string) bool {
	return strings.HasPrefix(name, metricPrefix) && len(name) <= 255
}

func serveMetrics(h *handler, r *http.Request, c *call) (any, error) {
	now := time.Now().UTC()
	out := MetricsSummary{Time: now, Metrics: map[string]MetricSummary{}}
	if h.scraper != nil {
		out.Sources = []MetricSource{}
	}
	var mfs []*dto.MetricFamily
	if h.cfg.Gatherer != nil {
		var err error
		if mfs, err = h.cfg.Gatherer.Gather(); err != nil && h.scraper == nil {
			return nil, err
		}
		// With sources, the others' figures still show; the local error is logged.
		if err != nil {
			h.cfg.Logger.Warn("admin: the local metrics could not be gathered", "err", err)
		}
	}
	add := func(src string, mf *dto.MetricFamily) {
		name := mf.GetName()
		if !isIdemMetric(name) {
			return
		}
		prev, ok := out.Metrics[name]
		if !ok && len(out.Metrics) == MaxMetricFamilies {
			return
		}
		s := summarize(mf)
		if ok {
			s = merge(prev, s)
		}
		if h.scraper != nil {
			s.From = append(prev.From, src)
		}
		out.Metrics[name] = s
	}
	for _, mf := range mfs {
		add(localSource, mf)
	}
	if h.scraper != nil {
		for _, sc := range h.scraper.read(r.Context(), now) {
			out.Sources = append(out.Sources, sc.src)
			for _, name := range slices.Sorted(maps.Keys(sc.mfs)) {
				add(sc.src.URL, sc.mfs[name])
			}
		}
	}
	return out, nil
}

// merge adds b, another source's figure of a family, to a. A family whose type
// differs between sources keeps a's type.
func merge(a, b MetricSummary) MetricSummary {
	a.Value += b.Value
	a.Sum += b.Sum
	for _, o := range slices.Sorted(maps.Keys(b.ByOutcome)) {
		if a.ByOutcome == nil {
			a.ByOutcome = map[string]float64{}
		}
		k := o
		if _, ok := a.ByOutcome[k]; !ok && len(a.ByOutcome) >= MaxMetricOutcomes-1 {
			k = "other"
		}
		a.ByOutcome[k] += b.ByOutcome[o]
	}
	return a
}

// summarize adds up the series of mf.
func summarize(mf *dto.MetricFamily) MetricSummary {
	s := MetricSummary{Type: strings.ToLower(mf.GetType().String())}
	for _, m := range mf.GetMetric() {
		var v, sum float64
		switch mf.GetType() {
		case dto.MetricType_COUNTER:
			v = m.GetCounter().GetValue()
		case dto.MetricType_GAUGE:
			v = m.GetGauge().GetValue()
		case dto.MetricType_HISTOGRAM, dto.MetricType_GAUGE_HISTOGRAM:
			v, sum = float64(m.GetHistogram().GetSampleCount()), m.GetHistogram().GetSampleSum()
		case dto.MetricType_SUMMARY:
			v, sum = float64(m.GetSummary().GetSampleCount()), m.GetSummary().GetSampleSum()
		default:
			v = m.GetUntyped().GetValue()
		}
		if !finite(v) || !finite(sum) {
			continue
		}
		s.Value += v
		s.Sum += sum
		for _, l := range m.GetLabel() {
			if l.GetName() != "outcome" {
				continue
			}
			if s.ByOutcome == nil {
				s.ByOutcome = map[string]float64{}
			}
			o := view.Clean(l.GetValue(), 64)
			if _, ok := s.ByOutcome[o]; !ok && len(s.ByOutcome) >= MaxMetricOutcomes-1 {
				o = "other"
			}
			s.ByOutcome[o] += v
		}
	}
	return s
}

func finite(f float64) bool { return !math.IsNaN(f) && !math.IsInf(f, 0) }
