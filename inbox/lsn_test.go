package inbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"testing"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemseq"
	"github.com/idemhq/idem/inbox"
)

// cdcMessage is order i as a CDC relay publishes it: source "db/slot", the commit
// LSN of its transaction and its index there.
func cdcMessage(i int, lsn uint64, idx int) idem.Message {
	m := order(i)
	m.Headers = map[string]string{"idem-source": "shop/idem_outbox", "idem-lsn": fmt.Sprintf("%X/%X", lsn>>32, uint32(lsn)),
		"idem-lsn-index": fmt.Sprint(idx)}
	return m
}

// WithLSN applies every message once although each arrives twice (a relay restarted
// between publish and confirm), keeps one watermark row for the source and no key
// records; a message without position headers falls back to its key.
func TestLSNDedup(t *testing.T) {
	t.Parallel()
	forEachDialect(t, func(t *testing.T, b bundle) {
		ctx := context.Background()
		tracker, err := inbox.NewLSNTracker(ctx, b.txdb, inbox.LSNConfig{Scope: "ledger"})
		if err != nil {
			t.Fatal(err)
		}
		fb := newFakeBroker()
		c, err := inbox.New(ctx, fb, b.txdb, b.store, credit, inbox.Config{Consumer: "ledger", BatchSize: 1}, inbox.WithLSN(tracker))
		if err != nil {
			t.Fatal(err)
		}
		const n = 30
		lsn := uint64(0x1_6B37_4D48) // above 2^32: both halves of the printed LSN matter
		var ms []idem.Message
		for i := 0; i < n; i++ {
			if i%3 == 0 {
				lsn += 0x1a0 // a new transaction every three messages
			}
			ms = append(ms, cdcMessage(i, lsn, i%3))
		}
		fb.Publish(ctx, ms...)
		fb.Publish(ctx, ms[12:]...) // the relay's republication after a kill
		plain := order(n)
		fb.Publish(ctx, plain, plain)
		drain(t, c, fb)
		exactLedger(t, b.db, n+1, "after the copies")
		var seqRows, keyRows int
		b.db.QueryRow("SELECT COUNT(*) FROM idem_sequences").Scan(&seqRows)
		b.db.QueryRow("SELECT COUNT(*) FROM idem_records").Scan(&keyRows)
		if seqRows != 1 || keyRows != 1 {
			t.Fatalf("%d watermark rows and %d key records; want 1 (the source) and 1 (the message without a position)", seqRows, keyRows)
		}
		got, idx, ok, err := tracker.Watermark(ctx, "shop/idem_outbox")
		if !ok || err != nil || got != lsn || idx != 2 {
			t.Fatalf("watermark %X/%d (%v, %v), want %X/2", got, idx, ok, err, lsn)
		}
	})
}

// The verdicts: above the watermark is Accepted and moves it, at or below it is a
// Duplicate; out-of-range positions and sources are refused.
func TestLSNTrackerVerdicts(t *testing.T) {
	t.Parallel()
	forEachDialect(t, func(t *testing.T, b bundle) {
		ctx := context.Background()
		tr, err := inbox.NewLSNTracker(ctx, b.txdb, inbox.LSNConfig{})
		if err != nil {
			t.Fatal(err)
		}
		check := func(src string, lsn, idx uint64) (v idemseq.Verdict, err error) {
			err = b.txdb.InTx(ctx, func(tx *sql.Tx) (err error) {
				v, err = tr.CheckTx(ctx, tx, src, lsn, idx)
				return err
			})
			return v, err
		}
		for i, tc := range []struct {
			src      string
			lsn, idx uint64
			want     idemseq.Verdict
		}{
			{"a", 100, 0, idemseq.Accepted},
			{"a", 100, 0, idemseq.Duplicate},
			{"a", 100, 1, idemseq.Accepted},
			{"b", 50, 0, idemseq.Accepted}, // sources are independent
			{"a", 99, 7, idemseq.Duplicate},
			{"a", 200, 0, idemseq.Accepted},
			{"a", 100, 9, idemseq.Duplicate},
			{"a", 1<<62 + 1, 0, idemseq.Accepted},
			{"b", 50, 0, idemseq.Duplicate},
		} {
			if v, err := check(tc.src, tc.lsn, tc.idx); err != nil || v != tc.want {
				t.Fatalf("check %d (%s %d/%d) = %v, %v; want %v", i, tc.src, tc.lsn, tc.idx, v, err, tc.want)
			}
		}
		for _, bad := range []struct {
			src      string
			lsn, idx uint64
		}{{"", 1, 0}, {string(make([]byte, 256)), 1, 0}, {"a", 0, 0}, {"a", 1 << 63, 0}, {"a", 5, 1 << 32}} {
			var ie *idem.InputError
			if _, err := check(bad.src, bad.lsn, bad.idx); !errors.As(err, &ie) {
				t.Fatalf("check(%d-byte source, %d, %d) = %v, want an InputError", len(bad.src), bad.lsn, bad.idx, err)
			}
		}
	})
}

// LSNPosition refuses malformed headers rather than guessing a position.
func TestLSNPositionRefusesMalformedHeaders(t *testing.T) {
	t.Parallel()
	for _, h := range []map[string]string{
		{"idem-lsn": "0/10", "idem-lsn-index": "0"},
		{"idem-source": "s", "idem-lsn": "10", "idem-lsn-index": "0"},
		{"idem-source": "s", "idem-lsn": "0/0", "idem-lsn-index": "0"},
		{"idem-source": "s", "idem-lsn": "G/10", "idem-lsn-index": "0"},
		{"idem-source": "s", "idem-lsn": "1/100000000", "idem-lsn-index": "0"},
		{"idem-source": "s", "idem-lsn": "0/10", "idem-lsn-index": "-1"},
		{"idem-source": "s", "idem-lsn": "0/10"},
	} {
		if _, _, _, ok := inbox.LSNPosition(idem.Delivery{Message: idem.Message{Headers: h}}); ok {
			t.Errorf("LSNPosition(%v) ok", h)
		}
	}
	src, lsn, idx, ok := inbox.LSNPosition(idem.Delivery{Message: idem.Message{Headers: map[string]string{
		"idem-source": "s", "idem-lsn": "16/B374D848", "idem-lsn-index": "3"}}})
	if !ok || src != "s" || lsn != 0x16_B374D848 || idx != 3 {
		t.Fatalf("LSNPosition = %s %X %d %v", src, lsn, idx, ok)
	}
}

// The state stays O(1): 100,000 positions of two sources, with a copy of every
// seventh, leave two rows of the same size as after the first thousand (on
// PostgreSQL; the statements are the same on SQLite).
func TestLSNWatermarkStaysO1(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("100,000 checks")
	}
	func(t *testing.T, b bundle) {
		ctx := context.Background()
		tr, err := inbox.NewLSNTracker(ctx, b.txdb, inbox.LSNConfig{})
		if err != nil {
			t.Fatal(err)
		}
		const total, perTx = 100_000, 2_000
		lsn := map[string]uint64{"a": 0x1000, "b": 0x1000}
		idx := map[string]uint64{}
		size := func() (rows, bytes int) {
			if err := b.db.QueryRow("SELECT COUNT(*), COALESCE(SUM(LENGTH(scope) + LENGTH(producer) + 16 + COALESCE(LENGTH(bits), 0)), 0) FROM idem_sequences").Scan(&rows, &bytes); err != nil {
				t.Fatal(err)
			}
			return rows, bytes
		}
		var firstBytes, accepted, dups int
		for done := 0; done < total; done += perTx {
			err := b.txdb.InTx(ctx, func(tx *sql.Tx) error {
				for i := done; i < done+perTx; i++ {
					src := "a"
					if i%2 == 1 {
						src = "b"
					}
					if i%5 == 0 { // a new transaction of up to five events
						lsn[src] += 0x88
						idx[src] = 0
					}
					v, err := tr.CheckTx(ctx, tx, src, lsn[src], idx[src])
					if err != nil {
						return err
					}
					if v == idemseq.Accepted {
						accepted++
					}
					if i%7 == 0 {
						if v, err = tr.CheckTx(ctx, tx, src, lsn[src], idx[src]); err != nil || v != idemseq.Duplicate {
							return fmt.Errorf("copy of %d: %v, %v", i, v, err)
						}
						dups++
					}
					idx[src]++
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			rows, bytes := size()
			if firstBytes == 0 {
				firstBytes = bytes
			}
			if rows != 2 || bytes != firstBytes {
				t.Fatalf("after %d events: %d rows of %d bytes; want 2 rows of %d", done+perTx, rows, bytes, firstBytes)
			}
		}
		if accepted != total || dups != (total+6)/7 {
			t.Fatalf("%d accepted and %d copies dropped; want %d and %d", accepted, dups, total, (total+6)/7)
		}
		t.Logf("%d events, %d copies dropped, state: 2 rows, %d bytes", total, dups, firstBytes)
	}(t, postgresBundle(t))
}

// WithLSN runs one message per transaction: a batch retried in part would apply a
// source's positions out of order and take the retried one for a copy (a loss), so
// a BatchSize above 1 is refused, naming the field.
func TestLSNRefusesBatches(t *testing.T) {
	t.Parallel()
	b := sqliteBundle(t)
	ctx := context.Background()
	tracker, err := inbox.NewLSNTracker(ctx, b.txdb, inbox.LSNConfig{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = inbox.New(ctx, newFakeBroker(), b.txdb, b.store, credit, inbox.Config{Consumer: "ledger", BatchSize: 16}, inbox.WithLSN(tracker))
	var in *idem.InputError
	if !errors.As(err, &in) || in.Field != "Config.BatchSize" {
		t.Fatalf("WithLSN with BatchSize 16: %v, want an *idem.InputError on Config.BatchSize", err)
	}
	if _, err := inbox.New(ctx, newFakeBroker(), b.txdb, b.store, credit, inbox.Config{Consumer: "ledger"}, inbox.WithLSN(tracker)); err != nil {
		t.Fatalf("WithLSN with the default BatchSize: %v", err)
	}
}
