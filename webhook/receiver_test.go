package webhook_test

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemhttp"
	"github.com/idemhq/idem/idemmem"
	"github.com/idemhq/idem/idemmysql"
	"github.com/idemhq/idem/idempg"
	"github.com/idemhq/idem/idemredis"
	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/idemsqlite"
	"github.com/idemhq/idem/internal/testsvc"
	"github.com/idemhq/idem/webhook"
)

// testKey is the HMAC key of testSecret.
var testKey = []byte("receiver test secret, 32 bytes!!")

var testSecret = "whsec_" + base64.StdEncoding.EncodeToString(testKey)

// sender delivers Standard Webhooks events to url as a sender would: each attempt
// signed anew with the current time.
type sender struct {
	url string
	key []byte
}

type reply struct {
	status int
	header http.Header
	body   string
}

func (s sender) deliver(ctx context.Context, t testing.TB, id, body string, ts time.Time) (reply, error) {
	sig := "v1," + base64.StdEncoding.EncodeToString(webhook.Sign(s.key, fmt.Appendf(nil, "%s.%d.%s", id, ts.Unix(), body)))
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header = stdHeader(id, ts.Unix(), sig)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return reply{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return reply{resp.StatusCode, resp.Header, string(b)}, err
}

// untilDone delivers until the receiver answers 2xx, as a sender retries: a 409
// (still running) or 5xx is retried. It returns the final reply.
func (s sender) untilDone(t testing.TB, id, body string) reply {
	giveUp := time.Now().Add(2 * time.Minute) // a safety net only: each retry waits for progress, not a time
	for {
		r, err := s.deliver(context.Background(), t, id, body, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		if r.status < 300 {
			return r
		}
		if r.status != http.StatusConflict && r.status < 500 {
			t.Fatalf("event %s: %d %s", id, r.status, r.body)
		}
		if time.Now().After(giveUp) {
			t.Fatalf("event %s never completed: last %d %s", id, r.status, r.body)
		}
		time.Sleep(time.Millisecond) // a sender's backoff, shortened
	}
}

// effects counts the handler's effects per event, and can hold an event's handler
// until told, or fail its first run.
type effects struct {
	mu      sync.Mutex
	applied map[string]int
	runs    atomic.Int64
	held    map[string]chan struct{} // closed when the handler may return
	started map[string]chan struct{} // closed when the handler started
	failed  map[string]bool          // events whose first run answers 500
}

func newEffects() *effects {
	return &effects{applied: map[string]int{}, held: map[string]chan struct{}{}, started: map[string]chan struct{}{}, failed: map[string]bool{}}
}

func (e *effects) hold(id string) (started, release chan struct{}) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.started[id], e.held[id] = make(chan struct{}), make(chan struct{})
	return e.started[id], e.held[id]
}

func (e *effects) failOnce(id string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.failed[id] = true
}

func (e *effects) count(id string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.applied[id]
}

// handler applies the event with apply (nil: counted in memory).
func (e *effects) handler(t testing.TB, apply func(r *http.Request, id string) error) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		e.runs.Add(1)
		id := webhook.EventID(r.Context())
		body, _ := io.ReadAll(r.Body)
		if !bytes.Contains(body, []byte(id)) {
			t.Errorf("event %s: the handler got body %q", id, body)
		}
		e.mu.Lock()
		started, held, fail := e.started[id], e.held[id], e.failed[id]
		delete(e.started, id)
		delete(e.failed, id)
		e.mu.Unlock()
		if started != nil {
			close(started)
			<-held
		}
		if fail {
			http.Error(w, "database down", http.StatusInternalServerError)
			return
		}
		if apply != nil {
			if err := apply(r, id); err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
		}
		e.mu.Lock()
		e.applied[id]++
		e.mu.Unlock()
		fmt.Fprintf(w, "handled %s", id)
	})
}

type receiverEnv struct {
	// mw wraps the handler; count reports the effects of an event as the store's
	// database sees them (nil: the handler's in-memory count).
	mw    func(http.Handler) http.Handler
	apply func(r *http.Request, id string) error
	count func(t testing.TB, id string) int
}

func plainEnv(t testing.TB, store idem.Store) receiverEnv {
	mw := must(webhook.Receiver(webhook.Config{Verifier: must(webhook.Standard(testSecret))(t), Store: store, Scope: "test"}))(t)
	return receiverEnv{mw: mw}
}

func atomicEnv[Tx any](t testing.TB, db idemsql.TxDB[Tx], store idem.TxStore[Tx]) receiverEnv {
	ctx := context.Background()
	table := "wh_effects_" + strings.ToLower(strings.ReplaceAll(testsvc.UniqueName("t"), "-", "_"))
	if err := db.InTx(ctx, func(tx Tx) error {
		_, err := db.Querier(tx).Exec(ctx, "CREATE TABLE "+table+" (event TEXT NOT NULL)")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	mw := must(webhook.AtomicReceiver(db, store, webhook.Config{Verifier: must(webhook.Standard(testSecret))(t), Scope: "test"}))(t)
	return receiverEnv{
		mw: mw,
		apply: func(r *http.Request, id string) error {
			tx, ok := idemhttp.TxFrom[Tx](r.Context())
			if !ok {
				return errors.New("no transaction in the handler's context")
			}
			_, err := db.Querier(tx).Exec(r.Context(), "INSERT INTO "+table+" (event) VALUES ($1)", id)
			return err
		},
		count: func(t testing.TB, id string) (n int) {
			if err := db.InTx(ctx, func(tx Tx) error {
				return db.Querier(tx).QueryRow(ctx, "SELECT COUNT(*) FROM "+table+" WHERE event = $1", id).Scan(&n)
			}); err != nil {
				t.Fatal(err)
			}
			return n
		},
	}
}

func sqliteStore(t testing.TB) *idemsqlite.Store {
	s := must(idemsqlite.Open(context.Background(), filepath.Join(t.TempDir(), "idem.db"), idemsqlite.Config{}))(t)
	t.Cleanup(func() { s.Close() })
	return s
}

var receiverEnvs = []struct {
	name string
	open func(t *testing.T) receiverEnv
}{
	{"memory", func(t *testing.T) receiverEnv { return plainEnv(t, must(idemmem.New(idemmem.Config{}))(t)) }},
	{"sqlite", func(t *testing.T) receiverEnv { return plainEnv(t, sqliteStore(t)) }},
	{"postgres", func(t *testing.T) receiverEnv {
		return plainEnv(t, must(idempg.New(context.Background(), testsvc.PostgresPool(t), idempg.Config{}))(t))
	}},
	{"mariadb", func(t *testing.T) receiverEnv {
		return plainEnv(t, must(idemmysql.New(context.Background(), testsvc.MySQLDB(t), idemmysql.Config{}))(t))
	}},
	{"redis", func(t *testing.T) receiverEnv {
		client := redis.NewClient(&redis.Options{Addr: testsvc.RedisAddr()})
		t.Cleanup(func() { client.Close() })
		return plainEnv(t, must(idemredis.New(client, idemredis.Config{Prefix: testsvc.RedisPrefix(t)}))(t))
	}},
	{"atomic/sqlite", func(t *testing.T) receiverEnv {
		s := sqliteStore(t)
		return atomicEnv(t, must(idemsql.SQLDB(context.Background(), s.DB()))(t), idem.TxStore[*sql.Tx](s))
	}},
	{"atomic/mariadb", func(t *testing.T) receiverEnv {
		db := testsvc.MySQLDB(t)
		return atomicEnv(t, idemmysql.TxDB(db), idem.TxStore[*sql.Tx](must(idemmysql.New(context.Background(), db, idemmysql.Config{}))(t)))
	}},
	{"atomic/postgres", func(t *testing.T) receiverEnv {
		pool := testsvc.PostgresPool(t)
		return atomicEnv[pgx.Tx](t, idempg.TxDB(pool), must(idempg.New(context.Background(), pool, idempg.Config{}))(t))
	}},
}

func TestReceiver(t *testing.T) {
	t.Parallel()
	for _, env := range receiverEnvs {
		t.Run(env.name, func(t *testing.T) {
			t.Parallel()
			receiverSuite(t, env.open(t))
		})
	}
}

func receiverSuite(t *testing.T, env receiverEnv) {
	eff := newEffects()
	srv := httptest.NewServer(env.mw(eff.handler(t, env.apply)))
	t.Cleanup(srv.Close)
	snd := sender{url: srv.URL, key: testKey}
	count := eff.count
	if env.count != nil {
		count = func(id string) int { return env.count(t, id) }
	}
	ctx := context.Background()
	body := func(id string) string { return `{"type":"invoice.paid","data":{"id":"` + id + `"}}` }

	t.Run("a slow handler outlives the sender's timeout; its retries do not run it again", func(t *testing.T) {
		id := testsvc.UniqueName("msg_slow")
		started, release := eff.hold(id)
		first := make(chan error, 1)
		sendCtx, giveUp := context.WithCancel(ctx)
		go func() { _, err := snd.deliver(sendCtx, t, id, body(id), time.Now()); first <- err }()
		<-started
		giveUp() // the sender's timeout: it stops waiting and will retry
		if err := <-first; err == nil {
			t.Fatal("the first attempt was answered although the sender gave up")
		}
		// Retries and concurrent duplicates while the first still runs: none is
		// told the event is handled, none runs it.
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				r, err := snd.deliver(ctx, t, id, body(id), time.Now())
				switch {
				case err != nil:
					t.Error(err)
				case env.count != nil:
					// Atomic: the duplicate's claim waits for the first transaction,
					// so its 2xx can only be the committed answer, replayed.
					if r.status != http.StatusOK || r.body != "handled "+id || r.header.Get("Idempotent-Replayed") != "true" {
						t.Errorf("a duplicate of a running event got %d %q, want the first run's answer replayed", r.status, r.body)
					}
				case r.status < 300:
					t.Errorf("a duplicate of a running event got %d: the sender would stop retrying an event that may yet fail", r.status)
				case r.status != http.StatusConflict:
					t.Errorf("a duplicate of a running event got %d %s, want 409", r.status, r.body)
				case r.header.Get("Retry-After") == "":
					t.Error("409 without Retry-After")
				}
			})
			if env.count != nil {
				break // atomic: the duplicate blocks until release; one is enough
			}
		}
		if env.count == nil {
			wg.Wait()
		}
		close(release)
		wg.Wait()
		r := snd.untilDone(t, id, body(id))
		if r.body != "handled "+id {
			t.Errorf("the retry got %q, want the first run's answer", r.body)
		}
		if n := count(id); n != 1 {
			t.Errorf("event applied %d times, want 1", n)
		}
	})

	t.Run("a completed event is replayed, not run", func(t *testing.T) {
		id := testsvc.UniqueName("msg_replay")
		snd.untilDone(t, id, body(id))
		before := eff.runs.Load()
		for range 3 {
			r := snd.untilDone(t, id, body(id))
			if r.status != http.StatusOK || r.body != "handled "+id || r.header.Get("Idempotent-Replayed") != "true" {
				t.Errorf("replay = %d %q (Idempotent-Replayed %q)", r.status, r.body, r.header.Get("Idempotent-Replayed"))
			}
		}
		if got := eff.runs.Load(); got != before {
			t.Errorf("the handler ran %d more times for replays", got-before)
		}
		if n := count(id); n != 1 {
			t.Errorf("event applied %d times, want 1", n)
		}
	})

	t.Run("a failed handler lets the sender's retry run it", func(t *testing.T) {
		id := testsvc.UniqueName("msg_fail")
		eff.failOnce(id)
		r, err := snd.deliver(ctx, t, id, body(id), time.Now())
		if err != nil || r.status != http.StatusInternalServerError {
			t.Fatalf("first attempt = %d %v, want 500", r.status, err)
		}
		if r := snd.untilDone(t, id, body(id)); r.body != "handled "+id || r.header.Get("Idempotent-Replayed") != "" {
			t.Errorf("retry = %d %q, want the handler run again", r.status, r.body)
		}
		if n := count(id); n != 1 {
			t.Errorf("event applied %d times, want 1", n)
		}
	})

	t.Run("forged and expired deliveries are refused and leave the event unclaimed", func(t *testing.T) {
		id := testsvc.UniqueName("msg_forged")
		forger := sender{url: srv.URL, key: []byte("not the endpoint's secret at all")}
		for name, try := range map[string]func() (reply, error){
			"forged":  func() (reply, error) { return forger.deliver(ctx, t, id, body(id), time.Now()) },
			"expired": func() (reply, error) { return snd.deliver(ctx, t, id, body(id), time.Now().Add(-10*time.Minute)) },
			"future":  func() (reply, error) { return snd.deliver(ctx, t, id, body(id), time.Now().Add(10*time.Minute)) },
		} {
			r, err := try()
			if err != nil || r.status != http.StatusBadRequest || !strings.Contains(r.body, webhook.ProblemVerification) {
				t.Errorf("%s: %d %q %v, want 400 %s", name, r.status, r.body, err, webhook.ProblemVerification)
			}
		}
		before := eff.runs.Load()
		if r := snd.untilDone(t, id, body(id)); r.header.Get("Idempotent-Replayed") != "" {
			t.Errorf("the genuine delivery was replayed: a refused one had claimed the event")
		}
		if eff.runs.Load() != before+1 || count(id) != 1 {
			t.Errorf("the genuine delivery ran %d times, applied %d", eff.runs.Load()-before, count(id))
		}
	})

	t.Run("many events, each delivered concurrently and retried: each applied once, none lost", func(t *testing.T) {
		const events, copies = 20, 4
		prefix := testsvc.UniqueName("msg_many")
		var wg sync.WaitGroup
		for i := range events {
			id := prefix + "_" + strconv.Itoa(i)
			if i%5 == 0 {
				eff.failOnce(id)
			}
			for range copies {
				wg.Go(func() { snd.untilDone(t, id, body(id)) })
			}
		}
		wg.Wait()
		for i := range events {
			if n := count(prefix + "_" + strconv.Itoa(i)); n != 1 {
				t.Errorf("event %d applied %d times, want 1", i, n)
			}
		}
	})
}
