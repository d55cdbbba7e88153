package idemseq_test

import (
	"context"
	"fmt"
	"runtime"
	"testing"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemkey"
	"github.com/idemhq/idem/idemmem"
	"github.com/idemhq/idem/idemseq"
)

// BenchmarkWindowCheck is the core check on one producer's window, single core: in
// order, reordered (each pair of numbers swapped), and every number twice.
func BenchmarkWindowCheck(b *testing.B) {
	for _, bc := range []struct {
		name string
		seq  func(i uint64) uint64
	}{
		{"in-order", func(i uint64) uint64 { return i }},
		{"reordered", func(i uint64) uint64 { return i ^ 1 }},
		{"duplicated", func(i uint64) uint64 { return i / 2 }},
	} {
		// The baseline: the reference model's structure, a set of every number seen.
		b.Run(bc.name+"/baseline=map-set", func(b *testing.B) {
			seen := make(map[uint64]struct{})
			b.ReportAllocs()
			var accepted int
			for i := 0; b.Loop(); i++ {
				seq := bc.seq(uint64(i))
				if _, dup := seen[seq]; !dup {
					seen[seq] = struct{}{}
					accepted++
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "checks/s")
			if accepted == 0 {
				b.Fatal("nothing accepted")
			}
		})
		b.Run(bc.name+"/window", func(b *testing.B) {
			w, _ := idemseq.NewWindow(idemseq.DefaultWindow)
			b.ReportAllocs()
			var accepted int
			for i := 0; b.Loop(); i++ {
				if v, _ := w.Check(1, bc.seq(uint64(i))); v == idemseq.Accepted {
					accepted++
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "checks/s")
			if accepted == 0 {
				b.Fatal("nothing accepted")
			}
		})
	}
}

// BenchmarkMemoryCheck is the tracker call, with the producer lookup and lock, over
// 100 producers; the parallel variant shows the sharding.
func BenchmarkMemoryCheck(b *testing.B) {
	ctx := context.Background()
	producers := make([]string, 100)
	for i := range producers {
		producers[i] = fmt.Sprintf("producer-%03d", i)
	}
	b.Run("serial", func(b *testing.B) {
		m, _ := idemseq.NewMemory(idemseq.Config{})
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			if _, err := m.Check(ctx, producers[i%100], 1, uint64(i/100)); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "checks/s")
	})
	b.Run("parallel", func(b *testing.B) {
		m, _ := idemseq.NewMemory(idemseq.Config{})
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			var i uint64
			p := producers[int(i)%100]
			for pb.Next() {
				if _, err := m.Check(ctx, p, 1, i); err != nil {
					b.Error(err)
					return
				}
				if i++; i%64 == 0 {
					p = producers[int(i/64)%100]
				}
			}
		})
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "checks/s")
	})
}

// BenchmarkRememberedState measures the memory each strategy keeps to deduplicate one
// million messages from 100 producers: a set of UUIDs (a Go map, and idemmem's
// compact completed records) against one sequence window per producer. Run it with
// -benchtime=1x: each iteration builds the whole state.
func BenchmarkRememberedState(b *testing.B) {
	const producers, perProducer = 100, 10_000
	const messages = producers * perProducer
	b.Run("uuid-map", func(b *testing.B) {
		for b.Loop() {
			before := heap()
			set := make(map[string]struct{})
			for i := 0; i < messages; i++ {
				set[idemkey.NewV4()] = struct{}{}
			}
			reportState(b, heap()-before, messages, producers)
			runtime.KeepAlive(set)
		}
	})
	b.Run("idemmem-store", func(b *testing.B) {
		ctx := context.Background()
		for b.Loop() {
			before := heap()
			s, err := idemmem.New(idemmem.Config{})
			if err != nil {
				b.Fatal(err)
			}
			for i := 0; i < messages; i++ {
				c := idem.Claim{Key: idem.Key{Scope: "consumer", ID: idemkey.NewV4()}}
				r, err := s.Claim(ctx, c)
				if err != nil {
					b.Fatal(err)
				}
				if err := s.Complete(ctx, c.Key, r.Token, nil); err != nil {
					b.Fatal(err)
				}
			}
			reportState(b, heap()-before, messages, producers)
			runtime.KeepAlive(s)
		}
	})
	b.Run("seq-window", func(b *testing.B) {
		ctx := context.Background()
		for b.Loop() {
			before := heap()
			m, _ := idemseq.NewMemory(idemseq.Config{})
			for seq := uint64(0); seq < perProducer; seq++ {
				for p := 0; p < producers; p++ {
					if _, err := m.Check(ctx, fmt.Sprintf("producer-%03d", p), 1, seq); err != nil {
						b.Fatal(err)
					}
				}
			}
			reportState(b, heap()-before, messages, producers)
			runtime.KeepAlive(m)
		}
	})
}

func heap() int64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}

func reportState(b *testing.B, bytes int64, messages, producers int) {
	b.ReportMetric(float64(bytes), "state-bytes")
	b.ReportMetric(float64(bytes)/float64(messages), "B/message")
	b.ReportMetric(float64(bytes)/float64(producers), "B/producer")
}
