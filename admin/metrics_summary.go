package admin

import (
	"math"
	"net/http"
	"strings"
	"time"

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
// metric of Config.Gatherer, summed over its labels. A console polls it and
// computes rates from two summaries (Δvalue / Δtime).
type MetricsSummary struct {
	// Time is when the metrics were gathered.
	Time    time.Time                `json:"time"`
	Metrics map[string]MetricSummary `json:"metrics"`
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
}

func serveMetrics(h *handler, r *http.Request, c *call) (any, error) {
	mfs, err := h.cfg.Gatherer.Gather()
	if err != nil {
		return nil, err
	}
	out := MetricsSummary{Time: time.Now().UTC(), Metrics: map[string]MetricSummary{}}
	for _, mf := range mfs {
		name := mf.GetName()
		if !strings.HasPrefix(name, metricPrefix) || len(name) > 255 {
			continue
		}
		if len(out.Metrics) == MaxMetricFamilies {
			break
		}
		out.Metrics[name] = summarize(mf)
	}
	return out, nil
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
			o := clean(l.GetValue(), 64)
			if _, ok := s.ByOutcome[o]; !ok && len(s.ByOutcome) >= MaxMetricOutcomes-1 {
				o = "other"
			}
			s.ByOutcome[o] += v
		}
	}
	return s
}

func finite(f float64) bool { return !math.IsNaN(f) && !math.IsInf(f, 0) }
