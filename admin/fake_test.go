package admin_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/admin"
	"github.com/idemhq/idem/audit"
	"github.com/idemhq/idem/idemtest"
	"github.com/prometheus/client_golang/prometheus"
)

const (
	fullToken = "full-token-0123456789abcdef"
	readToken = "read-token-0123456789abcdef"
)

// fakeInspector is an in-memory idem.Inspector: idemmem does not implement it yet.
type fakeInspector struct {
	mu   sync.Mutex
	recs map[idem.Key]idem.Record
	err  error // returned by every call when set
}

var _ idem.Inspector = (*fakeInspector)(nil)

func (f *fakeInspector) Inspect(ctx context.Context, k idem.Key) (idem.Record, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return idem.Record{}, f.err
	}
	rec, ok := f.recs[k]
	if !ok {
		return idem.Record{}, idem.ErrNotFound
	}
	return rec, nil
}

func (f *fakeInspector) List(ctx context.Context, scope, cursor string, limit int) (idem.KeyPage, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return idem.KeyPage{}, f.err
	}
	var ids []string
	for k := range f.recs {
		if k.Scope == scope && k.ID > cursor {
			ids = append(ids, k.ID)
		}
	}
	slices.Sort(ids)
	var page idem.KeyPage
	for i, id := range ids {
		if i == limit {
			page.Next = ids[i-1]
			break
		}
		page.Records = append(page.Records, f.recs[idem.Key{Scope: scope, ID: id}])
	}
	return page, nil
}

func (f *fakeInspector) Evict(ctx context.Context, k idem.Key, force bool) (idem.Record, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return idem.Record{}, f.err
	}
	rec, ok := f.recs[k]
	switch {
	case !ok:
		return idem.Record{}, idem.ErrNotFound
	case rec.State == idem.StateInProgress && !force:
		return idem.Record{}, &idem.InputError{Field: "force", Reason: "is false and the key is in progress", Fix: "set force"}
	}
	delete(f.recs, k)
	return rec, nil
}

var _ idem.ScopeLister = (*fakeInspector)(nil)

// Scopes lists the distinct scopes above cursor (the last scope of the previous
// page, as is), in order; the cursor "garbage" is refused as a store would.
func (f *fakeInspector) Scopes(ctx context.Context, cursor string, limit int) (idem.ScopePage, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return idem.ScopePage{}, f.err
	}
	if cursor == "garbage" {
		return idem.ScopePage{}, &idem.InputError{Field: "cursor", Reason: "is not a cursor this store made", Fix: "pass back Next"}
	}
	var scopes []string
	for k := range f.recs {
		if k.Scope > cursor {
			scopes = append(scopes, k.Scope)
		}
	}
	slices.Sort(scopes)
	scopes = slices.Compact(scopes)
	var page idem.ScopePage
	if len(scopes) > limit {
		scopes = scopes[:limit]
		page.Next = scopes[limit-1]
	}
	page.Scopes = scopes
	return page, nil
}

// plainInspector hides the fake's Scopes: a store that cannot list its scopes.
type plainInspector struct{ idem.Inspector }

func (f *fakeInspector) put(rec idem.Record) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.recs[rec.Key] = rec
}

func (f *fakeInspector) has(k idem.Key) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	_, ok := f.recs[k]
	return ok
}

// fakeDeadLetters holds dead letters by id.
type fakeDeadLetters struct {
	mu        sync.Mutex
	dls       map[int64]admin.DeadLetter
	applied   map[int64]bool
	lastQuery admin.DeadLetterFilter
	discarded map[int64]string
}

func (f *fakeDeadLetters) List(ctx context.Context, q admin.DeadLetterFilter) (admin.DeadLetterPage, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lastQuery = q
	var page admin.DeadLetterPage
	for _, d := range f.dls {
		if (q.Consumer == "" || d.Consumer == q.Consumer) && strings.Contains(d.Reason, q.ReasonContains) {
			page.DeadLetters = append(page.DeadLetters, d)
		}
	}
	slices.SortFunc(page.DeadLetters, func(a, b admin.DeadLetter) int { return int(a.ID - b.ID) })
	return page, nil
}

func (f *fakeDeadLetters) Get(ctx context.Context, id int64) (admin.DeadLetter, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	d, ok := f.dls[id]
	if !ok {
		return d, idem.ErrNotFound
	}
	return d, nil
}

func (f *fakeDeadLetters) Replay(ctx context.Context, ids []int64, reason string) ([]admin.ReplayResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []admin.ReplayResult
	for _, id := range ids {
		r := admin.ReplayResult{ID: id, Outcome: admin.OutcomeReplayed}
		if _, ok := f.dls[id]; !ok {
			r.Outcome = admin.OutcomeNotFound
		} else if f.applied[id] {
			r.Outcome, r.Detail = admin.OutcomeAlreadyApplied, "the key was completed since"
		}
		out = append(out, r)
	}
	return out, nil
}

func (f *fakeDeadLetters) Discard(ctx context.Context, id int64, reason string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.dls[id]; !ok {
		return idem.ErrNotFound
	}
	delete(f.dls, id)
	f.discarded[id] = reason
	return nil
}

// fakeOutbox, fakeEffects, fakeSagas and fakeStream are structs of function
// fields: each test sets what it calls.
type fakeOutbox struct {
	status  func(ctx context.Context) (admin.OutboxStatus, error)
	parked  func(ctx context.Context, cursor string, limit int) (admin.ParkedPage, error)
	retry   func(ctx context.Context, id int64) error
	discard func(ctx context.Context, id int64, reason string) error
}

func (f *fakeOutbox) Status(ctx context.Context) (admin.OutboxStatus, error) { return f.status(ctx) }
func (f *fakeOutbox) Parked(ctx context.Context, cursor string, limit int) (admin.ParkedPage, error) {
	return f.parked(ctx, cursor, limit)
}
func (f *fakeOutbox) Retry(ctx context.Context, id int64) error { return f.retry(ctx, id) }
func (f *fakeOutbox) Discard(ctx context.Context, id int64, reason string) error {
	return f.discard(ctx, id, reason)
}

// fakeQueue holds unfinished messages "m1" and "m2" of topic "orders"; Cancel
// finishes one.
type fakeQueue struct {
	mu        sync.Mutex
	cancelled map[string]string // id -> reason
}

func (f *fakeQueue) Status(context.Context) (admin.QueueStatus, error) {
	return admin.QueueStatus{Topics: []admin.QueueTopic{{Topic: "orders", Ready: 1, Running: 1, OldestReadyAgeSeconds: 2.5}}}, nil
}

func (f *fakeQueue) Messages(_ context.Context, topic string, finished bool, cursor string, limit int) (admin.QueueMessagePage, error) {
	if finished || (topic != "" && topic != "orders") || cursor != "" {
		return admin.QueueMessagePage{}, nil
	}
	return admin.QueueMessagePage{Messages: []admin.QueueMessage{{ID: 1, MessageID: "m1", Topic: "orders", State: "ready", CreatedAt: t0, AvailableAt: t0},
		{ID: 2, MessageID: "m2", Topic: "orders", State: "running", Attempts: 1, LeasedBy: "w1", CreatedAt: t0, AvailableAt: t0}}}, nil
}

func (f *fakeQueue) Cancel(_ context.Context, topic, id, reason string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, done := f.cancelled[id]; done || topic != "orders" || (id != "m1" && id != "m2") {
		return idem.ErrNotFound
	}
	f.cancelled[id] = reason
	return nil
}

type fakeEffects struct {
	list func(ctx context.Context, f admin.EffectFilter) (admin.EffectPage, error)
}

func (f *fakeEffects) List(ctx context.Context, q admin.EffectFilter) (admin.EffectPage, error) {
	return f.list(ctx, q)
}

type fakeSagas struct {
	list    func(ctx context.Context, f admin.SagaFilter) (admin.SagaPage, error)
	get     func(ctx context.Context, id string) (admin.SagaDetail, error)
	retry   func(ctx context.Context, id, reason string) error
	resolve func(ctx context.Context, id, note string) error
}

func (f *fakeSagas) List(ctx context.Context, q admin.SagaFilter) (admin.SagaPage, error) {
	return f.list(ctx, q)
}
func (f *fakeSagas) Get(ctx context.Context, id string) (admin.SagaDetail, error) {
	return f.get(ctx, id)
}
func (f *fakeSagas) RetryStep(ctx context.Context, id, reason string) error {
	return f.retry(ctx, id, reason)
}
func (f *fakeSagas) Resolve(ctx context.Context, id, note string) error {
	return f.resolve(ctx, id, note)
}

type fakeStream struct {
	status func(ctx context.Context) (admin.StreamStatus, error)
}

func (f *fakeStream) Status(ctx context.Context) (admin.StreamStatus, error) { return f.status(ctx) }

// fakeAudit answers a report with one row, missing one message; a repair run
// republishes it. It records the runs it was asked for.
type fakeAudit struct {
	mu   sync.Mutex
	runs []bool // the repair argument of each Run
}

func (f *fakeAudit) Run(_ context.Context, repair bool) (*admin.AuditReport, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.runs = append(f.runs, repair)
	rep := &admin.AuditReport{At: t0, From: t0.Add(-time.Hour), To: t0, Grace: 5 * time.Minute, Scanned: 10, Pages: 1,
		Rows: []audit.Row{{Topic: "orders", Consumer: "billing", Published: 10, Applied: 8, DeadLettered: 1, Missing: 1,
			MissingIDs: []string{"m9"}, Latency: audit.Latency{Count: 8, P99: 40 * time.Millisecond}}}}
	if repair {
		rep.Repaired = []admin.AuditRepair{{CopyID: 11, OrigID: 9, MsgID: "m9", Topic: "orders", Consumers: []string{"billing"}, At: t0}}
	}
	return rep, nil
}

// Repairs lists copies 5, 4, … 1, newest first, before the cursor's id.
func (f *fakeAudit) Repairs(_ context.Context, cursor string, limit int) (admin.AuditRepairPage, error) {
	before := int64(6)
	if cursor != "" {
		if _, err := fmt.Sscan(cursor, &before); err != nil {
			return admin.AuditRepairPage{}, &idem.InputError{Field: "cursor", Reason: "is not a cursor", Fix: "pass back next"}
		}
	}
	var page admin.AuditRepairPage
	for id := before - 1; id >= 1 && len(page.Repairs) < limit; id-- {
		page.Repairs = append(page.Repairs, admin.AuditRepair{CopyID: id, OrigID: id + 100, MsgID: fmt.Sprint("m", id), Topic: "orders"})
	}
	if len(page.Repairs) == limit && page.Repairs[limit-1].CopyID > 1 {
		page.Next = fmt.Sprint(page.Repairs[limit-1].CopyID)
	}
	return page, nil
}

func (f *fakeAudit) asked() []bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.runs)
}

// bundle is a handler over fakes, with its log and metrics.
type bundle struct {
	h    http.Handler
	logs *bytes.Buffer
	reg  *prometheus.Registry
	ins  *fakeInspector
	dl   *fakeDeadLetters
	ob   *fakeOutbox
	ef   *fakeEffects
	sg   *fakeSagas
	st   *fakeStream
	au   *fakeAudit
	qu   *fakeQueue
}

var t0 = time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)

func setup(t testing.TB, mod func(*admin.Config)) *bundle {
	t.Helper()
	b := &bundle{
		logs: &bytes.Buffer{},
		reg:  prometheus.NewRegistry(),
		ins:  &fakeInspector{recs: map[idem.Key]idem.Record{}},
		dl: &fakeDeadLetters{dls: map[int64]admin.DeadLetter{
			1: {ID: 1, Consumer: "orders", Kind: "permanent", Reason: "card declined", Attempts: 1, DeadAt: t0, Payload: []byte(`{"order":1}`)},
			2: {ID: 2, Consumer: "billing", Kind: "max_attempts", Reason: "timeout", Attempts: 9, DeadAt: t0, Payload: []byte{0xff, 0x00}},
		}, applied: map[int64]bool{2: true}, discarded: map[int64]string{}},
		ob: &fakeOutbox{
			status: func(context.Context) (admin.OutboxStatus, error) {
				return admin.OutboxStatus{Partitions: []admin.OutboxPartition{{Topic: "orders", Backlog: 3, OldestAgeSeconds: 1.5}},
					Parked: 1, Relays: []admin.RelayStatus{{Instance: "relay-a", LastRound: t0, Published: 42}}}, nil
			},
			parked: func(_ context.Context, cursor string, limit int) (admin.ParkedPage, error) {
				return admin.ParkedPage{Messages: []admin.ParkedMessage{{ID: 7, MessageID: "m7", Topic: "orders", Attempts: 10,
					LastError: "broker down", Payload: []byte("hello")}}, Next: "c2"}, nil
			},
			retry:   func(_ context.Context, id int64) error { return notFoundUnless(id, 7) },
			discard: func(_ context.Context, id int64, _ string) error { return notFoundUnless(id, 7) },
		},
		ef: &fakeEffects{list: func(_ context.Context, f admin.EffectFilter) (admin.EffectPage, error) {
			return admin.EffectPage{Effects: []admin.Effect{{Key: "charge/o1", State: f.State, Attempts: 2}}}, nil
		}},
		sg: &fakeSagas{
			list: func(_ context.Context, f admin.SagaFilter) (admin.SagaPage, error) {
				return admin.SagaPage{Sagas: []admin.Saga{{ID: "s1", Name: "checkout", State: "failed"}}}, nil
			},
			get: func(_ context.Context, id string) (admin.SagaDetail, error) {
				if id != "s1" {
					return admin.SagaDetail{}, idem.ErrNotFound
				}
				return admin.SagaDetail{Saga: admin.Saga{ID: "s1", Name: "checkout", State: "failed", Reason: "refund failed"},
					Steps: []admin.SagaStep{{Name: "charge", State: "compensation_failed", Attempts: 3, Error: "refund failed"}}}, nil
			},
			retry: func(_ context.Context, id, _ string) error {
				if id == "done" {
					return fmt.Errorf("saga %s is completed: %w", id, admin.ErrConflict)
				}
				return notFoundUnless(len(id), 2)
			},
			resolve: func(_ context.Context, id, _ string) error { return notFoundUnless(len(id), 2) },
		},
		au: &fakeAudit{},
		qu: &fakeQueue{cancelled: map[string]string{}},
		st: &fakeStream{status: func(context.Context) (admin.StreamStatus, error) {
			return admin.StreamStatus{Channels: []admin.StreamChannel{{Name: "orders", LastSeq: 10}},
				Clients: []admin.StreamClient{{ID: "c1", Channel: "orders", AckedSeq: 7, Lag: 3}}}, nil
		}},
	}
	cfg := admin.Config{
		Token: fullToken, ReadToken: readToken,
		Stores:      map[string]idem.Inspector{"main": b.ins},
		DeadLetters: b.dl, Outbox: b.ob, Effects: b.ef, Sagas: b.sg, Stream: b.st, Audit: b.au, Queue: b.qu, Gatherer: b.reg,
		Logger:     slog.New(slog.NewJSONHandler(b.logs, nil)),
		Registerer: b.reg,
	}
	if mod != nil {
		mod(&cfg)
	}
	h, err := admin.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	b.h = h
	return b
}

func notFoundUnless[T comparable](got, want T) error {
	if got != want {
		return idem.ErrNotFound
	}
	return nil
}

// do sends a request with token (none if empty); a non-empty body is sent as JSON.
func (b *bundle) do(t testing.TB, method, target, token, body string) *httptest.ResponseRecorder {
	t.Helper()
	var r *http.Request
	if body != "" {
		r = httptest.NewRequest(method, target, strings.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
	} else {
		r = httptest.NewRequest(method, target, nil)
	}
	if token != "" {
		r.Header.Set("Authorization", "Bearer "+token)
	}
	return b.serve(r)
}

func (b *bundle) serve(r *http.Request) *httptest.ResponseRecorder {
	w := httptest.NewRecorder()
	b.h.ServeHTTP(w, r)
	return w
}

type problemBody struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail"`
}

// wantProblem checks w is a problem of status and type whose detail contains
// each of details.
func wantProblem(t testing.TB, w *httptest.ResponseRecorder, status int, typ string, details ...string) problemBody {
	t.Helper()
	var p problemBody
	if w.Code != status {
		t.Fatalf("status %d, want %d: %s", w.Code, status, w.Body)
	}
	if ct := w.Header().Get("Content-Type"); ct != admin.ContentTypeProblem {
		t.Fatalf("Content-Type %q, want %q", ct, admin.ContentTypeProblem)
	}
	if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil {
		t.Fatal(err)
	}
	if p.Type != typ || p.Status != status || p.Title == "" {
		t.Fatalf("problem %+v, want type %s status %d", p, typ, status)
	}
	for _, d := range details {
		if !strings.Contains(p.Detail, d) {
			t.Errorf("detail %q does not contain %q", p.Detail, d)
		}
	}
	return p
}

// wantJSON checks w is 200 JSON and decodes it into v.
func wantJSON(t testing.TB, w *httptest.ResponseRecorder, v any) {
	t.Helper()
	if w.Code != http.StatusOK {
		t.Fatalf("status %d, want 200: %s", w.Code, w.Body)
	}
	if ct := w.Header().Get("Content-Type"); ct != "application/json" {
		t.Fatalf("Content-Type %q", ct)
	}
	if err := json.Unmarshal(w.Body.Bytes(), v); err != nil {
		t.Fatalf("%v: %s", err, w.Body)
	}
}

// auditRecords returns the audit records logged so far.
func (b *bundle) auditRecords(t testing.TB) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(b.logs.String()), "\n") {
		if line == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("%v: %s", err, line)
		}
		if m["msg"] == "admin: audit" {
			out = append(out, m)
		}
	}
	return out
}

// counter returns the value of idem_admin_requests_total{route,code}, 0 if absent.
func counter(t testing.TB, b *bundle, route, code string) float64 {
	t.Helper()
	return idemtest.MetricSum(t, b.reg, "idem_admin_requests_total", map[string]string{"route": route, "code": code})
}

func bodyOf(s string) io.ReadCloser { return io.NopCloser(strings.NewReader(s)) }
