package audit

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// The histogram's quantiles stay within one bucket (19%) above the exact ones,
// never below them, whatever the distribution; Max is exact.
func TestHistQuantilesBounded(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, gen := range []struct {
		name string
		draw func() time.Duration
	}{
		{"uniform", func() time.Duration { return time.Duration(rng.Int64N(int64(10 * time.Second))) }},
		{"exponential", func() time.Duration { return time.Duration(rng.ExpFloat64() * float64(50*time.Millisecond)) }},
		{"sub-millisecond", func() time.Duration { return time.Duration(rng.Int64N(int64(time.Millisecond))) }},
		{"hours", func() time.Duration { return time.Duration(rng.Int64N(int64(20 * time.Hour))) }},
		{"past the last bucket", func() time.Duration { return 13*24*time.Hour + time.Duration(rng.Int64N(int64(time.Hour))) }},
	} {
		t.Run(gen.name, func(t *testing.T) {
			var h hist
			var all []time.Duration
			for range 20000 {
				d := gen.draw()
				h.observe(d)
				all = append(all, d)
			}
			slices.Sort(all)
			for _, q := range []float64{0.5, 0.9, 0.99} {
				exact := all[int(q*float64(len(all)))-1]
				got := h.quantile(q)
				limit := time.Duration(float64(exact)*1.19) + time.Millisecond
				if exact > time.Duration(float64(histBase)*(1<<30)) {
					limit = all[len(all)-1] // past the last bucket: Max
				}
				if got < exact || got > limit {
					t.Errorf("q%.2f = %v, exact %v: want within [exact, %v]", q, got, exact, limit)
				}
			}
			if h.max != all[len(all)-1] || h.count != int64(len(all)) {
				t.Errorf("max %v count %d, want %v %d", h.max, h.count, all[len(all)-1], len(all))
			}
		})
	}
	var empty hist
	if l := empty.latency(); l != (Latency{}) {
		t.Errorf("empty histogram: %+v", l)
	}
	var neg hist
	neg.observe(-time.Second) // clocks that disagree
	if neg.max != 0 || neg.quantile(0.5) != 0 {
		t.Errorf("a negative latency reads %v/%v, want 0", neg.max, neg.quantile(0.5))
	}
}
