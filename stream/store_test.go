package stream_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/internal/sqltest"
	"github.com/idemhq/idem/stream"
	"github.com/idemhq/idem/stream/streamtest"
)

// The Store contract, on SQLite, Postgres and MySQL (idemredis runs it on Redis).
func TestStoreSuite(t *testing.T) {
	t.Parallel()
	for name, open := range map[string]func(testing.TB) idemsql.TxDB[*sql.Tx]{
		"sqlite": sqltest.SQLite, "postgres": sqltest.Postgres, "mysql": sqltest.MySQL} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			streamtest.StoreSuite(t, streamtest.Harness{New: func(t *testing.T, cfg streamtest.Config) stream.Store {
				s, err := stream.NewSQLStore(context.Background(), open(t), stream.SQLConfig{Now: cfg.Now, MaxClients: cfg.MaxClients})
				if err != nil {
					t.Fatal(err)
				}
				return s
			}})
		})
	}
}

// Keys are compared as bytes at any length (MySQL keeps a hash of the key in its
// unique index), and an over-long client id is refused where the column would
// cut it (MySQL).
func TestSQLStoreKeys(t *testing.T) {
	t.Parallel()
	sqltest.ForEachDialect(t, func(t *testing.T, db idemsql.TxDB[*sql.Tx]) {
		ctx := context.Background()
		s := sqlStore(t, db)
		long := strings.Repeat("k", 1000)
		for i, tc := range []struct {
			key  string
			want uint64
		}{{long, 1}, {long + "x", 2}, {"K1", 3}, {"k1", 4}, {long, 1}, {"K1", 3}, {"k1", 4}} {
			e, err := s.Append(ctx, "c", stream.Event{Type: "t", ID: "o-1", Key: tc.key})
			if err != nil || e.Seq != tc.want {
				t.Fatalf("append %d (key of %d bytes) = seq %d, %v; want %d", i, len(tc.key), e.Seq, err, tc.want)
			}
		}
		err := s.Ack(ctx, "c", strings.Repeat("p", 300), 1)
		var ie *idem.InputError
		if db.Dialect() == idemsql.MySQL && (!errors.As(err, &ie) || ie.Field != "client") {
			t.Fatalf("Ack with a 300-byte client id = %v, want an InputError on client", err)
		}
		if db.Dialect() != idemsql.MySQL && err != nil {
			t.Fatalf("Ack with a 300-byte client id = %v", err)
		}
	})
}

// Appends to several channels while Trim deletes behind them: every append
// succeeds (a transaction the database rolls back for a deadlock runs again)
// and each channel's seqs have no gap.
func TestSQLStoreAppendsDuringTrim(t *testing.T) {
	t.Parallel()
	sqltest.ForEachDialect(t, func(t *testing.T, db idemsql.TxDB[*sql.Tx]) {
		ctx := context.Background()
		s := sqlStore(t, db)
		const channels, each = 4, 40
		// Each ack lets one Trim run: trims interleave with the appends without
		// spinning, which on SQLite (one writer, no fairness among waiters) would
		// starve the appenders past their busy timeout.
		acked := make(chan struct{}, channels*each)
		var wg sync.WaitGroup
		for c := range channels {
			wg.Go(func() {
				ch := fmt.Sprint("c", c)
				for i := range each {
					e, err := s.Append(ctx, ch, stream.Event{Type: "t", Key: fmt.Sprint("k", i)})
					if err != nil || e.Seq != uint64(i+1) {
						t.Errorf("append %d to %s = seq %d, %v", i, ch, e.Seq, err)
						return
					}
					if err := s.Ack(ctx, ch, "phone", e.Seq); err != nil {
						t.Errorf("ack %s %d: %v", ch, e.Seq, err)
						return
					}
					acked <- struct{}{}
				}
			})
		}
		appended := make(chan struct{})
		go func() { wg.Wait(); close(appended) }()
		trimmed := 0
		for busy := true; busy; {
			select {
			case <-appended:
				busy = false
			case <-acked:
			}
			n, err := s.Trim(ctx, time.Hour)
			if err != nil {
				<-appended
				t.Fatalf("Trim: %v", err)
			}
			trimmed += n
		}
		if t.Failed() {
			return
		}
		// The last Trim ran after every ack.
		if trimmed != channels*each {
			t.Fatalf("trimmed %d events in all, want %d", trimmed, channels*each)
		}
		for c := range channels {
			if h, err := s.Head(ctx, fmt.Sprint("c", c)); err != nil || h != each {
				t.Fatalf("Head(c%d) = %d, %v; want %d", c, h, err, each)
			}
		}
	})
}
