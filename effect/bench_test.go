package effect_test

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/effect"
	"github.com/idemhq/idem/internal/sqltest"
	"github.com/idemhq/idem/internal/testsvc"
)

// BenchmarkFence compares an effect through the fence (two short transactions
// around the call) with the bare call to the same local HTTP service: the baseline.
func BenchmarkFence(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"id":"ch_1"}`))
	}))
	defer srv.Close()
	client := srv.Client()
	call := func(ctx context.Context, key string) ([]byte, error) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL, strings.NewReader("{}"))
		req.Header.Set("Idempotency-Key", key)
		resp, err := client.Do(req)
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		return io.ReadAll(resp.Body)
	}
	b.Run("bare-call", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			if _, err := call(context.Background(), fmt.Sprint(i)); err != nil {
				b.Fatal(err)
			}
		}
	})
	for _, db := range []string{"sqlite", "postgres"} {
		b.Run("fence-"+db, func(b *testing.B) {
			f, err := effect.New(context.Background(), benchDB(b, db), effect.Config{})
			if err != nil {
				b.Fatal(err)
			}
			var n atomic.Int64
			prefix := testsvc.UniqueName("k")
			for b.Loop() {
				if _, err := f.Do(context.Background(), fmt.Sprintf("%s-%d", prefix, n.Add(1)), "charge", call); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func benchDB(b *testing.B, name string) idem.TxDB[*sql.Tx] {
	if name == "sqlite" {
		return sqltest.SQLite(b)
	}
	return sqltest.Postgres(b)
}
