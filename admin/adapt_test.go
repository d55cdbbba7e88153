package admin_test

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/coder/websocket"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/admin"
	"github.com/idemhq/idem/effect"
	"github.com/idemhq/idem/effect/saga"
	"github.com/idemhq/idem/idemmysql"
	"github.com/idemhq/idem/idempg"
	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/idemsqlite"
	"github.com/idemhq/idem/inbox"
	"github.com/idemhq/idem/internal/sqltest"
	"github.com/idemhq/idem/internal/testsvc"
	"github.com/idemhq/idem/outbox"
	"github.com/idemhq/idem/stream"
)

// backend is one SQL database with the idempotency store on it, as an inbox
// consumer needs them.
type backend struct {
	db    idemsql.TxDB[*sql.Tx]
	store interface {
		idem.TxStore[*sql.Tx]
		idem.Store
		idem.Inspector
	}
}

// forEachBackend runs fn on SQLite, PostgreSQL and MySQL/MariaDB, in parallel.
func forEachBackend(t *testing.T, fn func(t *testing.T, b backend)) {
	ctx := context.Background()
	open := map[string]func(t *testing.T) backend{
		"sqlite": func(t *testing.T) backend {
			s, err := idemsqlite.Open(ctx, filepath.Join(t.TempDir(), "admin.db"), idemsqlite.Config{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			return backend{db: txdbOf(t, s.DB()), store: s}
		},
		"postgres": func(t *testing.T) backend {
			db := testsvc.PostgresDB(t)
			s, err := idempg.NewSQL(ctx, db, idempg.Config{})
			if err != nil {
				t.Fatal(err)
			}
			return backend{db: txdbOf(t, db), store: s}
		},
		"mysql": func(t *testing.T) backend {
			db := sqltest.MySQLDollarDB(t)
			s, err := idemmysql.New(ctx, db, idemmysql.Config{})
			if err != nil {
				t.Fatal(err)
			}
			return backend{db: txdbOf(t, db), store: s}
		},
	}
	for _, name := range []string{"sqlite", "postgres", "mysql"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			fn(t, open[name](t))
		})
	}
}

func txdbOf(t *testing.T, db *sql.DB) idemsql.TxDB[*sql.Tx] {
	t.Helper()
	d, err := idemsql.SQLDB(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// api is the admin handler over real areas, called with the full-access token.
type api struct{ h http.Handler }

func newAPI(t *testing.T, cfg admin.Config) api {
	t.Helper()
	cfg.Token = fullToken
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	h, err := admin.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return api{h}
}

// sqlAPI is the admin API over the areas whose tables b holds (admin.ForSQL),
// called with the full-access token, and its log.
func sqlAPI(t *testing.T, b backend) (api, *bytes.Buffer) {
	t.Helper()
	var cfg admin.Config
	if _, err := admin.ForSQL(context.Background(), b.db, &cfg); err != nil {
		t.Fatal(err)
	}
	logs := &bytes.Buffer{}
	cfg.Token, cfg.Logger = fullToken, slog.New(slog.NewJSONHandler(logs, nil))
	h, err := admin.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return api{h}, logs
}

func (a api) do(method, target, body string) *httptest.ResponseRecorder {
	var r *http.Request
	if body != "" {
		r = httptest.NewRequest(method, target, strings.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
	} else {
		r = httptest.NewRequest(method, target, nil)
	}
	r.Header.Set("Authorization", "Bearer "+fullToken)
	w := httptest.NewRecorder()
	a.h.ServeHTTP(w, r)
	return w
}

// idleSource delivers nothing: the consumer's Run only polls for requested replays.
type idleSource struct{}

func (idleSource) Receive(ctx context.Context, max int) ([]idem.Delivery, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}
func (idleSource) Close() error { return nil }

type nopSettler struct{}

func (nopSettler) Ack(context.Context) error                { return nil }
func (nopSettler) Nak(context.Context, time.Duration) error { return nil }

type realDeadLetter struct {
	ID, Attempts             int64
	Consumer, Kind, Reason   string
	MessageID                string `json:"message_id"`
	State                    string
	ReplayReason, ReplayNote string `json:"-"`
	Payload                  admin.Preview
	Headers                  map[string]string
}

// A dead letter made by a real inbox consumer is listed through the API, its
// replay is requested by POST, and the running consumer applies it once.
func TestAdaptDeadLettersReal(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		var failing atomic.Bool
		failing.Store(true)
		var calls atomic.Int64
		handle := func(ctx context.Context, tx *sql.Tx, m idem.Message) error {
			calls.Add(1)
			if failing.Load() {
				return inbox.Permanent(errors.New("card declined"))
			}
			return nil
		}
		c, err := inbox.New(ctx, idleSource{}, b.db, b.store, handle,
			inbox.Config{Consumer: "payments", ReplayPollInterval: 10 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		msgs := []idem.Message{{ID: "pay-1", Topic: "payments", Payload: []byte(`{"amount":5}`), Headers: map[string]string{"tenant": "t-9", "long": strings.Repeat("é", 300)}},
			{ID: "pay-2", Topic: "payments", Payload: []byte(`{"amount":7}`)}}
		for i, m := range msgs {
			c.Process(ctx, []idem.Delivery{{Message: m, Attempt: 1, Position: fmt.Sprint("p", i), Settler: nopSettler{}}})
		}

		a := newAPI(t, admin.Config{DeadLetters: admin.DeadLettersFrom(inbox.NewDeadLetterAdmin(b.db))})
		var page struct {
			DeadLetters []realDeadLetter
			Next        string
		}
		wantJSON(t, a.do("GET", "/api/deadletters?consumer=payments&limit=1", ""), &page)
		if len(page.DeadLetters) != 1 || page.Next == "" {
			t.Fatalf("first page %+v, want 1 letter and a next cursor", page)
		}
		first := page.DeadLetters[0]
		if first.MessageID != "pay-1" || first.Kind != "permanent" || first.State != inbox.StatePending ||
			!strings.Contains(first.Reason, "card declined") || first.Payload.Size != len(msgs[0].Payload) {
			t.Fatalf("dead letter %+v", first)
		}
		wantJSON(t, a.do("GET", "/api/deadletters?cursor="+page.Next, ""), &page)
		if len(page.DeadLetters) != 1 || page.DeadLetters[0].MessageID != "pay-2" {
			t.Fatalf("second page %+v", page)
		}
		second := page.DeadLetters[0]
		if first.Headers != nil {
			t.Fatalf("a list shows headers: %v", first.Headers)
		}
		var one realDeadLetter
		wantJSON(t, a.do("GET", fmt.Sprint("/api/deadletters/", first.ID), ""), &one)
		if one.Headers["tenant"] != "t-9" || len(one.Headers["long"]) > admin.MaxHeaderValue+len("…") || !utf8.ValidString(one.Headers["long"]) {
			t.Fatalf("headers of one dead letter: %q", one.Headers)
		}
		wantProblem(t, a.do("GET", "/api/deadletters?cursor=x1", ""), 400, admin.ProblemInvalid, "cursor")
		wantProblem(t, a.do("GET", "/api/deadletters/999999", ""), 404, admin.ProblemNotFound, "999999")

		// Replay is requested; the consumer, running, performs it once.
		failing.Store(false)
		before := calls.Load()
		var res struct{ Results []admin.ReplayResult }
		wantJSON(t, a.do("POST", "/api/deadletters/replay", fmt.Sprintf(`{"ids":[%d,999999],"reason":"card fixed"}`, first.ID)), &res)
		want := []admin.ReplayResult{{ID: first.ID, Outcome: admin.OutcomeRequested}, {ID: 999999, Outcome: admin.OutcomeNotFound}}
		if fmt.Sprint(res.Results) != fmt.Sprint(want) {
			t.Fatalf("replay results %+v, want %+v", res.Results, want)
		}
		runCtx, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- c.Run(runCtx) }()
		testsvc.Eventually(t, time.Minute, "the requested replay is applied", func() bool {
			var dl realDeadLetter
			wantJSON(t, a.do("GET", fmt.Sprint("/api/deadletters/", first.ID), ""), &dl)
			return dl.State == inbox.StateReplayed
		})
		stop()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Fatalf("Run: %v", err)
		}
		if n := calls.Load() - before; n != 1 {
			t.Fatalf("the handler ran %d times for the replay, want 1", n)
		}
		wantJSON(t, a.do("POST", "/api/deadletters/replay", fmt.Sprintf(`{"ids":[%d],"reason":"again"}`, first.ID)), &res)
		if res.Results[0].Outcome != admin.OutcomeAlreadyDone {
			t.Fatalf("second replay %+v, want already_done", res.Results)
		}
		// The replayed letter is no longer listed; the other one is discarded, once.
		wantJSON(t, a.do("GET", "/api/deadletters", ""), &page)
		if len(page.DeadLetters) != 1 || page.DeadLetters[0].ID != second.ID {
			t.Fatalf("open letters %+v, want only %d", page.DeadLetters, second.ID)
		}
		path := fmt.Sprint("/api/deadletters/", second.ID, "/discard")
		wantJSON(t, a.do("POST", path, `{"reason":"refunded by hand"}`), &struct{}{})
		wantProblem(t, a.do("POST", path, `{"reason":"again"}`), 409, admin.ProblemConflict, "discarded already")
		wantProblem(t, a.do("POST", "/api/deadletters/999999/discard", `{"reason":"r"}`), 404, admin.ProblemNotFound)
		var dl struct {
			State         string
			DiscardReason string `json:"discard_reason"`
		}
		wantJSON(t, a.do("GET", fmt.Sprint("/api/deadletters/", second.ID), ""), &dl)
		if dl.State != inbox.StateDiscarded || dl.DiscardReason != "refunded by hand" {
			t.Fatalf("discarded letter %+v", dl)
		}
	})
}

// failSink fails every publication while failing is set, and records the others.
type failSink struct {
	mu        sync.Mutex
	failing   bool
	published []string
}

func (s *failSink) Publish(ctx context.Context, msgs ...idem.Message) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failing {
		return errors.New("broker down")
	}
	for _, m := range msgs {
		s.published = append(s.published, m.ID)
	}
	return nil
}

// Messages parked by a real relay are listed, retried (and then published) and
// discarded through the API.
func TestAdaptOutboxReal(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		ob, err := outbox.New(ctx, b.db, outbox.Config{})
		if err != nil {
			t.Fatal(err)
		}
		err = b.db.InTx(ctx, func(tx *sql.Tx) error {
			_, err := ob.EnqueueTx(ctx, tx, idem.Message{ID: "m-1", Topic: "orders", Payload: []byte("one")},
				idem.Message{ID: "m-2", Topic: "orders", Payload: []byte("two")})
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		sink := &failSink{failing: true}
		relay, err := ob.Relay(sink, outbox.RelayConfig{MaxAttempts: 1, Instance: "relay-a",
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			t.Fatal(err)
		}
		_, _ = relay.RunOnce(ctx) // parks both: the sink fails

		a := newAPI(t, admin.Config{Outbox: admin.OutboxFrom(outbox.NewAdmin(b.db))})
		var st admin.OutboxStatus
		wantJSON(t, a.do("GET", "/api/outbox", ""), &st)
		var onOrders int64
		for _, p := range st.Partitions {
			if p.Topic == "orders" {
				onOrders += p.Parked
			}
		}
		if st.Parked != 2 || onOrders != 2 || len(st.Relays) != 1 || st.Relays[0].Instance != "relay-a" {
			t.Fatalf("status %+v, want 2 parked on orders and relay-a", st)
		}
		var parked struct {
			Messages []struct {
				ID          int64
				MessageID   string `json:"message_id"`
				LastError   string `json:"last_error"`
				DiscardedAt string `json:"discarded_at"`
			}
			Next string
		}
		wantJSON(t, a.do("GET", "/api/outbox/parked?limit=1", ""), &parked)
		if len(parked.Messages) != 1 || parked.Messages[0].MessageID != "m-1" || !strings.Contains(parked.Messages[0].LastError, "broker down") {
			t.Fatalf("parked %+v", parked)
		}
		id1 := parked.Messages[0].ID
		wantJSON(t, a.do("GET", "/api/outbox/parked?cursor="+parked.Next, ""), &parked)
		if len(parked.Messages) != 1 || parked.Messages[0].MessageID != "m-2" {
			t.Fatalf("second page %+v", parked)
		}
		id2 := parked.Messages[0].ID

		wantJSON(t, a.do("POST", fmt.Sprint("/api/outbox/parked/", id1, "/retry"), `{"reason":"broker back"}`), &struct{}{})
		wantJSON(t, a.do("POST", fmt.Sprint("/api/outbox/parked/", id2, "/discard"), `{"reason":"order cancelled"}`), &struct{}{})
		wantProblem(t, a.do("POST", fmt.Sprint("/api/outbox/parked/", id2, "/retry"), `{"reason":"r"}`), 404, admin.ProblemNotFound)
		wantProblem(t, a.do("POST", fmt.Sprint("/api/outbox/parked/", id1, "/discard"), `{"reason":"r"}`), 404, admin.ProblemNotFound)

		sink.mu.Lock()
		sink.failing = false
		sink.mu.Unlock()
		if _, err := relay.RunOnce(ctx); err != nil {
			t.Fatal(err)
		}
		sink.mu.Lock()
		published := fmt.Sprint(sink.published)
		sink.mu.Unlock()
		if published != "[m-1]" {
			t.Fatalf("published %s, want [m-1] (m-2 was discarded)", published)
		}
		wantJSON(t, a.do("GET", "/api/outbox", ""), &st)
		if st.Parked != 0 || st.Discarded != 1 || len(st.Relays) != 1 || st.Relays[0].Instance != "relay-a" || st.Relays[0].Stale {
			t.Fatalf("status after %+v", st)
		}
		wantJSON(t, a.do("GET", "/api/outbox/parked", ""), &parked)
		if len(parked.Messages) != 1 || parked.Messages[0].ID != id2 || parked.Messages[0].DiscardedAt == "" {
			t.Fatalf("parked after %+v, want only the discarded m-2", parked)
		}
	})
}

// A saga whose compensation failed shows as failed with its failed effect, is
// retried through the API, completes its compensation, and is then refused 409.
func TestAdaptSagasReal(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		var refundBroken atomic.Bool
		refundBroken.Store(true)
		def := saga.Definition{Name: "order", Steps: []saga.Step{
			{Name: "charge",
				Action: func(ctx context.Context, in saga.Input) ([]byte, error) { return []byte("ok"), nil },
				Compensate: func(ctx context.Context, in saga.Input) error {
					if refundBroken.Load() {
						return effect.Permanent(errors.New("refund API rejects the card"))
					}
					return nil
				}},
			{Name: "ship", NoCompensation: true, Action: func(ctx context.Context, in saga.Input) ([]byte, error) {
				return nil, effect.Permanent(errors.New("out of stock"))
			}},
		}}
		o, err := saga.New(ctx, b.db, saga.Config{Backoff: func(int) time.Duration { return 0 }}, def)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := o.Start(ctx, "order", "o-1", nil); err != nil {
			t.Fatal(err)
		}
		runUntil := func(state string) {
			t.Helper()
			a, err := saga.NewAdmin(ctx, b.db)
			if err != nil {
				t.Fatal(err)
			}
			testsvc.Eventually(t, time.Minute, "saga o-1 "+state, func() bool {
				if _, err := o.RunOnce(ctx); err != nil {
					t.Fatal(err)
				}
				d, err := a.Get(ctx, "o-1")
				return err == nil && d.State == state
			})
		}
		runUntil(saga.Failed)

		var cfg admin.Config
		skipped, err := admin.ForSQL(ctx, b.db, &cfg)
		if err != nil {
			t.Fatal(err)
		}
		if cfg.Sagas == nil || cfg.Effects == nil || cfg.Outbox != nil || skipped["outbox"] == nil {
			t.Fatalf("ForSQL on a database with sagas only: %+v, skipped %v", cfg, skipped)
		}
		a := newAPI(t, cfg)
		var list admin.SagaPage
		wantJSON(t, a.do("GET", "/api/sagas?state=failed", ""), &list)
		if len(list.Sagas) != 1 || list.Sagas[0].ID != "o-1" || list.Sagas[0].Name != "order" {
			t.Fatalf("failed sagas %+v", list)
		}
		var effects admin.EffectPage
		wantJSON(t, a.do("GET", "/api/effects", ""), &effects)
		var steps []string
		for _, e := range effects.Effects {
			if e.Key == "o-1" && e.State == effect.StateFailed {
				steps = append(steps, e.Step)
			}
		}
		if fmt.Sprint(steps) != "[do:ship undo:charge]" {
			t.Fatalf("effects %+v, want the failed do:ship and undo:charge", effects)
		}

		refundBroken.Store(false)
		wantJSON(t, a.do("POST", "/api/sagas/o-1/retry", `{"reason":"card re-enabled"}`), &struct{}{})
		runUntil(saga.Compensated)
		var d admin.SagaDetail
		wantJSON(t, a.do("GET", "/api/sagas/o-1", ""), &d)
		if d.State != saga.Compensated || len(d.Steps) == 0 || !strings.Contains(d.Reason, "card re-enabled") {
			t.Fatalf("saga after retry %+v", d)
		}
		wantProblem(t, a.do("POST", "/api/sagas/o-1/retry", `{"reason":"again"}`), 409, admin.ProblemConflict, "compensated")
		wantProblem(t, a.do("POST", "/api/sagas/o-1/resolve", `{"note":"n"}`), 409, admin.ProblemConflict)
		wantProblem(t, a.do("GET", "/api/sagas/nope", ""), 404, admin.ProblemNotFound)

		// A second saga, failed, resolved by hand.
		refundBroken.Store(true)
		if _, err := o.Start(ctx, "order", "o-2", nil); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 20; i++ {
			if _, err := o.RunOnce(ctx); err != nil {
				t.Fatal(err)
			}
		}
		wantJSON(t, a.do("POST", "/api/sagas/o-2/resolve", `{"note":"refunded by bank transfer"}`), &struct{}{})
		wantJSON(t, a.do("GET", "/api/sagas/o-2", ""), &d)
		if d.State != saga.Resolved || d.Resolution == nil || d.Resolution.Note != "refunded by bank transfer" {
			t.Fatalf("resolved saga %+v", d)
		}
		wantJSON(t, a.do("GET", "/api/sagas?state=resolved", ""), &list)
		if len(list.Sagas) != 1 || list.Sagas[0].ID != "o-2" {
			t.Fatalf("resolved sagas %+v", list)
		}
	})
}

// A key claimed on a real store is listed, evicted by POST, and claimable again.
func TestAdaptKeysReal(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		k := idem.Key{Scope: "orders", ID: "k-1"}
		res, err := b.store.Claim(ctx, idem.Claim{Key: k, Lease: time.Minute})
		if err != nil || res.Outcome != idem.Acquired {
			t.Fatalf("claim: %v %v", res.Outcome, err)
		}
		if err := b.store.Complete(ctx, k, res.Token, []byte("done")); err != nil {
			t.Fatal(err)
		}
		a := newAPI(t, admin.Config{Stores: map[string]idem.Inspector{"main": b.store}})
		var page struct {
			Records []struct{ ID, State string }
		}
		wantJSON(t, a.do("GET", "/api/keys?scope=orders", ""), &page)
		if len(page.Records) != 1 || page.Records[0].ID != "k-1" {
			t.Fatalf("keys %+v", page)
		}
		wantJSON(t, a.do("POST", "/api/keys/evict", `{"scope":"orders","id":"k-1","reason":"customer asked for a rerun"}`), &struct{}{})
		wantProblem(t, a.do("GET", "/api/key?scope=orders&id=k-1", ""), 404, admin.ProblemNotFound)
		res, err = b.store.Claim(ctx, idem.Claim{Key: k, Lease: time.Minute})
		if err != nil || res.Outcome != idem.Acquired {
			t.Fatalf("claim after evict: %v %v, want Acquired", res.Outcome, err)
		}
	})
}

// Effects of a real fence: without a state, the API pages through the failed ones,
// then those pending past their lease, one cursor across both.
func TestAdaptEffectsReal(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		// A fence whose clock is an hour behind leaves leases that have already passed.
		late, err := effect.New(ctx, b.db, effect.Config{Lease: time.Minute, Now: func() time.Time { return time.Now().Add(-time.Hour) }})
		if err != nil {
			t.Fatal(err)
		}
		for _, key := range []string{"e-pend-1", "e-pend-2"} {
			if _, err := late.Do(ctx, key, "charge", func(context.Context, string) ([]byte, error) {
				return nil, errors.New("timeout") // transient: stays pending
			}); err == nil {
				t.Fatal("a transient failure returned no error")
			}
		}
		if _, err := late.Do(ctx, "e-fail-1", "charge", func(context.Context, string) ([]byte, error) {
			return nil, effect.Permanent(errors.New("card stolen"))
		}); err == nil {
			t.Fatal("a permanent failure returned no error")
		}
		if _, err := late.Do(ctx, "e-done", "charge", func(context.Context, string) ([]byte, error) { return []byte("ok"), nil }); err != nil {
			t.Fatal(err)
		}
		ea, err := effect.NewAdmin(ctx, b.db)
		if err != nil {
			t.Fatal(err)
		}
		a := newAPI(t, admin.Config{Effects: admin.EffectsFrom(ea)})
		var seen []string
		cursor := ""
		for range 10 {
			var page admin.EffectPage
			wantJSON(t, a.do("GET", "/api/effects?limit=1&cursor="+cursor, ""), &page)
			for _, e := range page.Effects {
				seen = append(seen, e.Key+"/"+e.State)
			}
			if cursor = page.Next; cursor == "" {
				break
			}
		}
		if got := strings.Join(seen, " "); got != "e-fail-1/failed e-pend-1/pending e-pend-2/pending" {
			t.Fatalf("paged effects %q", got)
		}
		var page admin.EffectPage
		wantJSON(t, a.do("GET", "/api/effects?state=pending_past_lease", ""), &page)
		if len(page.Effects) != 2 || page.Effects[0].Key != "e-pend-1" || page.Effects[0].LeaseUntil.After(time.Now()) {
			t.Fatalf("pending past lease %+v", page)
		}
		wantJSON(t, a.do("GET", "/api/effects", ""), &page)
		if len(page.Effects) != 3 || page.Next != "" {
			t.Fatalf("one page of both %+v", page)
		}
		wantProblem(t, a.do("GET", "/api/effects?cursor=bogus", ""), 400, admin.ProblemInvalid, "cursor")
	})
}

// A real stream server with a WebSocket client: the API shows its channel and the
// client's sent and acked seqs.
func TestAdaptStreamReal(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store, err := stream.NewSQLStore(ctx, sqltest.SQLite(t), stream.SQLConfig{})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := stream.NewServer(store, stream.ServerConfig{AllowAnonymous: true, Heartbeat: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(func() { srv.Close(); hs.Close() })
	for i := range 3 {
		if _, err := srv.Append(ctx, "orders", stream.Event{Type: "order.updated", ID: fmt.Sprint("o-", i)}); err != nil {
			t.Fatal(err)
		}
	}
	ws, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(hs.URL, "http")+"/stream", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ws.CloseNow() })
	if err := ws.Write(ctx, websocket.MessageText, []byte(`{"type":"hello","channel":"orders","client":"dash"}`)); err != nil {
		t.Fatal(err)
	}
	// Ack only what was sent: wait for the third event, so that the server cannot
	// see the ack before it sent the events (an ack beyond them is refused).
	readCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for seen := uint64(0); seen < 3; {
		_, data, err := ws.Read(readCtx)
		if err != nil {
			t.Fatalf("waiting for the third event: %v", err)
		}
		var m struct{ Event *struct{ Seq uint64 } }
		if json.Unmarshal(data, &m) == nil && m.Event != nil {
			seen = m.Event.Seq
		}
	}
	// Then read what the server sends (heartbeats) until the test ends.
	go func() {
		for {
			if _, _, err := ws.Read(context.Background()); err != nil {
				return
			}
		}
	}()
	if err := ws.Write(ctx, websocket.MessageText, []byte(`{"type":"ack","seq":2}`)); err != nil {
		t.Fatal(err)
	}

	a := newAPI(t, admin.Config{Stream: admin.StreamFrom(srv)})
	var st admin.StreamStatus
	testsvc.Eventually(t, time.Minute, "the client sent 3 events and acked 2", func() bool {
		wantJSON(t, a.do("GET", "/api/stream", ""), &st)
		return len(st.Clients) == 1 && st.Clients[0].SentSeq == 3 && st.Clients[0].AckedSeq == 2
	})
	c := st.Clients[0]
	if c.ID != "dash" || c.Channel != "orders" || c.Lag != 1 || st.TotalClients != 1 ||
		len(st.Channels) != 1 || st.Channels[0] != (admin.StreamChannel{Name: "orders", LastSeq: 3, Clients: 1}) {
		t.Fatalf("stream status %+v", st)
	}
}
