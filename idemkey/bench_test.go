package idemkey_test

import (
	"testing"
	"time"

	"github.com/idemhq/idem/idemkey"
)

func BenchmarkNewV4(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		_ = idemkey.NewV4()
	}
}

func BenchmarkNewV7(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		_ = idemkey.NewV7()
	}
}

// The generators serialise on one mutex; this shows what that costs under contention.
func BenchmarkNewV7Parallel(b *testing.B) {
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			_ = idemkey.NewV7()
		}
	})
}

func BenchmarkNewULID(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		_ = idemkey.NewULID()
	}
}

func BenchmarkNewULIDParallel(b *testing.B) {
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			_ = idemkey.NewULID()
		}
	})
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
