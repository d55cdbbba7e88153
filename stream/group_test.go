package stream_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/internal/sqltest"
	"github.com/idemhq/idem/stream"
)

// Concurrent Appends share transactions (a group commit), and each still gets its
// own answer: seqs dense per channel in commit order, a key appended twice (even
// within one shared transaction) answered with the first event.
func TestAppendsShareTransactions(t *testing.T) {
	t.Parallel()
	sqltest.ForEachDialect(t, func(t *testing.T, db idemsql.TxDB[*sql.Tx]) {
		ctx := context.Background()
		s := sqlStore(t, db)
		const workers, each = 24, 40
		type got struct {
			channel, key string
			seq          uint64
		}
		var mu sync.Mutex
		var all []got
		var wg sync.WaitGroup
		errc := make(chan error, workers)
		for w := range workers {
			wg.Go(func() {
				for i := range each {
					ch := fmt.Sprintf("c%d", (w+i)%3)
					key := ""
					if i%4 == 0 {
						key = fmt.Sprintf("k%d", i) // the same keys from every worker
					}
					e, err := s.Append(ctx, ch, stream.Event{Type: "t", ID: fmt.Sprintf("w%d-%d", w, i), Key: key})
					if err != nil {
						errc <- err
						return
					}
					mu.Lock()
					all = append(all, got{ch, key, e.Seq})
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		close(errc)
		for err := range errc {
			t.Fatal(err)
		}
		byKey := map[string]uint64{}
		seqs := map[string]map[uint64]bool{}
		for _, g := range all {
			if seqs[g.channel] == nil {
				seqs[g.channel] = map[uint64]bool{}
			}
			if g.key != "" {
				id := g.channel + "/" + g.key
				if first, ok := byKey[id]; ok {
					if first != g.seq {
						t.Fatalf("key %s answered with seq %d and %d", id, first, g.seq)
					}
					continue
				}
				byKey[id] = g.seq
			}
			if seqs[g.channel][g.seq] {
				t.Fatalf("seq %d of %s given to two appends", g.seq, g.channel)
			}
			seqs[g.channel][g.seq] = true
		}
		for ch, set := range seqs {
			for seq := uint64(1); seq <= uint64(len(set)); seq++ {
				if !set[seq] {
					t.Fatalf("%s: seqs not dense, %d missing of %d", ch, seq, len(set))
				}
			}
			head, err := s.Head(ctx, ch)
			if err != nil || head != uint64(len(set)) {
				t.Fatalf("%s: head %d, %v; want %d", ch, head, err, len(set))
			}
		}
		if stream.SharedAppends(s) == 0 {
			t.Fatalf("%d concurrent appends never shared a transaction", workers*each)
		}
	})
}

// An append that fails inside a shared transaction fails alone: the others of its
// batch commit, with dense seqs.
func TestSharedAppendFailsAlone(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := sqltest.Postgres(t)
	s := sqlStore(t, db)
	if err := db.InTx(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `CREATE FUNCTION poison() RETURNS trigger LANGUAGE plpgsql AS $$
			BEGIN IF NEW.type = 'poison' THEN RAISE EXCEPTION 'poisoned event'; END IF; RETURN NEW; END $$;
			CREATE TRIGGER poison BEFORE INSERT ON idem_stream_events FOR EACH ROW EXECUTE FUNCTION poison()`)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	const workers, each = 16, 30
	var wg sync.WaitGroup
	var mu sync.Mutex
	okSeqs := map[uint64]bool{}
	poisoned := 0
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				typ := "t"
				if i%10 == w%10 {
					typ = "poison"
				}
				e, err := s.Append(ctx, "c", stream.Event{Type: typ, ID: "o"})
				mu.Lock()
				switch {
				case typ == "poison" && err != nil && strings.Contains(err.Error(), "poisoned event"):
					poisoned++
				case typ == "t" && err == nil && !okSeqs[e.Seq]:
					okSeqs[e.Seq] = true
				default:
					t.Errorf("append of %s: seq %d, %v", typ, e.Seq, err)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	for seq := uint64(1); seq <= uint64(len(okSeqs)); seq++ {
		if !okSeqs[seq] {
			t.Fatalf("seqs not dense: %d missing of %d", seq, len(okSeqs))
		}
	}
	if poisoned != workers*each/10 {
		t.Fatalf("%d poisoned appends failed, want %d", poisoned, workers*each/10)
	}
	if stream.SharedAppends(s) == 0 {
		t.Fatal("no append transaction was shared")
	}
	var ie *idem.InputError
	_, err := s.Append(ctx, "", stream.Event{Type: "t"})
	if !errors.As(err, &ie) {
		t.Fatalf("Append to an empty channel = %v, want an InputError", err)
	}
}
