package audit

import (
	"math"
	"time"
)

// The latency histogram: bucket i holds durations up to histBase·2^(i/4), so a
// quantile read as its bucket's upper bound is at most 19% above the truth, in
// bounded memory whatever the number of messages.
const (
	histBase    = time.Millisecond
	histPerOct  = 4
	histBuckets = 30*histPerOct + 1 // up to 2^30 ms ≈ 12.4 days; the last bucket holds what is longer
)

type hist struct {
	n     [histBuckets]int64
	count int64
	max   time.Duration
}

func (h *hist) observe(d time.Duration) {
	if d < 0 {
		d = 0 // the two databases' clocks disagree by more than the latency
	}
	h.count++
	h.max = max(h.max, d)
	i := 0
	if d > histBase {
		i = int(math.Ceil(math.Log2(float64(d)/float64(histBase)) * histPerOct))
	}
	h.n[min(i, histBuckets-1)]++
}

func (h *hist) quantile(q float64) time.Duration {
	if h.count == 0 {
		return 0
	}
	want := int64(math.Ceil(q * float64(h.count)))
	var seen int64
	for i, n := range h.n {
		if seen += n; seen >= want {
			if i == histBuckets-1 {
				return h.max // the overflow bucket has no bound of its own
			}
			return min(h.bound(i), h.max)
		}
	}
	return h.max
}

func (h *hist) bound(i int) time.Duration {
	return time.Duration(float64(histBase) * math.Exp2(float64(i)/histPerOct))
}

func (h *hist) latency() Latency {
	return Latency{Count: h.count, P50: h.quantile(0.50), P90: h.quantile(0.90), P99: h.quantile(0.99), Max: h.max}
}

// rowState is a Row being counted.
type rowState struct {
	Row
	lat hist
}

func (r *rowState) finish() { r.Latency = r.lat.latency() }
