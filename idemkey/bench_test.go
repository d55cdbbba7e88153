package idemkey_test

import (
	"testing"
	"time"

	"github.com/idemhq/idem/idemkey"
)

// BenchmarkNew runs each generator alone and in parallel: they serialise on one
// mutex, and the parallel runs show what that costs under contention.
func BenchmarkNew(b *testing.B) {
	for _, g := range []struct {
		name string
		gen  func() string
	}{
		{"V4", idemkey.NewV4},
		{"V7", idemkey.NewV7},
		{"ULID", idemkey.NewULID},
	} {
		b.Run(g.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_ = g.gen()
			}
		})
		b.Run(g.name+"/parallel", func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					_ = g.gen()
				}
			})
		})
	}
}

func BenchmarkIntent(b *testing.B) {
	ns := idemkey.NewNamespace("checkout")
	b.ReportAllocs()
	for b.Loop() {
		_ = idemkey.Intent(ns, "cart-7", "2026-03-14T15:09:26.535Z")
	}
}

func BenchmarkDerive(b *testing.B) {
	parent := idemkey.NewV7()
	b.ReportAllocs()
	for b.Loop() {
		_ = idemkey.Derive(parent, "charge")
	}
}

func BenchmarkParse(b *testing.B) {
	keys := []string{idemkey.NewV4(), idemkey.NewV7(), idemkey.NewULID(), "order-42"}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		_, _ = idemkey.Parse(keys[i%len(keys)])
		i++
	}
}

func BenchmarkCheckFresh(b *testing.B) {
	key, now := idemkey.NewV7(), time.Now()
	b.ReportAllocs()
	for b.Loop() {
		_ = idemkey.CheckFresh(key, 24*time.Hour, now)
	}
}
