package console_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/admin"
)

// The areas of the admin API as in-memory fakes: no store or component of this
// module implements them yet. Each acts as its real counterpart would on what the
// console shows (a replayed dead letter leaves the list, an evicted key is gone).

type fakeInspector struct {
	mu   sync.Mutex
	recs map[idem.Key]idem.Record
}

var _ idem.Inspector = (*fakeInspector)(nil)

func (f *fakeInspector) Inspect(ctx context.Context, k idem.Key) (idem.Record, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	rec, ok := f.recs[k]
	if !ok {
		return idem.Record{}, idem.ErrNotFound
	}
	return rec, nil
}

func (f *fakeInspector) List(ctx context.Context, scope, cursor string, limit int) (idem.KeyPage, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
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

func (f *fakeInspector) Scopes(ctx context.Context, cursor string, limit int) (idem.ScopePage, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
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

func (f *fakeInspector) has(k idem.Key) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	_, ok := f.recs[k]
	return ok
}

func (f *fakeInspector) result(scope, id string) []byte {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.recs[idem.Key{Scope: scope, ID: id}].Result
}

type fakeDeadLetters struct {
	mu       sync.Mutex
	dls      map[int64]admin.DeadLetter
	replayed []int64
}

func (f *fakeDeadLetters) List(ctx context.Context, q admin.DeadLetterFilter) (admin.DeadLetterPage, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
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

// Replay hands the messages back to their consumer: they leave the dead letters.
func (f *fakeDeadLetters) Replay(ctx context.Context, ids []int64, reason string) ([]admin.ReplayResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []admin.ReplayResult
	for _, id := range ids {
		r := admin.ReplayResult{ID: id, Outcome: admin.OutcomeReplayed}
		if _, ok := f.dls[id]; !ok {
			r.Outcome = admin.OutcomeNotFound
		} else {
			delete(f.dls, id)
			f.replayed = append(f.replayed, id)
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
	return nil
}

func (f *fakeDeadLetters) replayedIDs() []int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.replayed)
}

func (f *fakeDeadLetters) has(id int64) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	_, ok := f.dls[id]
	return ok
}

type fakeOutbox struct {
	mu     sync.Mutex
	parked map[int64]admin.ParkedMessage
}

func (f *fakeOutbox) Status(ctx context.Context) (admin.OutboxStatus, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return admin.OutboxStatus{
		Partitions: []admin.OutboxPartition{{Topic: "shipments", Backlog: 12, OldestAgeSeconds: 4.5}, {Topic: "orders", Backlog: 0}},
		Parked:     int64(len(f.parked)),
		Relays: []admin.RelayStatus{{Instance: "relay-a", Published: 1042, LastRound: time.Now()},
			{Instance: "relay-b", Published: 7, LastRound: time.Now().Add(-10 * time.Minute), Stale: true}},
	}, nil
}

func (f *fakeOutbox) Parked(ctx context.Context, cursor string, limit int) (admin.ParkedPage, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var page admin.ParkedPage
	for _, m := range f.parked {
		page.Messages = append(page.Messages, m)
	}
	slices.SortFunc(page.Messages, func(a, b admin.ParkedMessage) int { return int(a.ID - b.ID) })
	return page, nil
}

func (f *fakeOutbox) Retry(ctx context.Context, id int64) error { return f.remove(id) }
func (f *fakeOutbox) Discard(ctx context.Context, id int64, reason string) error {
	return f.remove(id)
}

func (f *fakeOutbox) remove(id int64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.parked[id]; !ok {
		return idem.ErrNotFound
	}
	delete(f.parked, id)
	return nil
}

func (f *fakeOutbox) parkedIDs() []int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	var ids []int64
	for id := range f.parked {
		ids = append(ids, id)
	}
	return ids
}

type fakeSagas struct {
	mu    sync.Mutex
	sagas []admin.Saga
}

func (f *fakeSagas) List(ctx context.Context, q admin.SagaFilter) (admin.SagaPage, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var page admin.SagaPage
	for _, s := range f.sagas {
		if q.State == "" || s.State == q.State || q.State == admin.SagaParked && s.Parked {
			page.Sagas = append(page.Sagas, s)
		}
	}
	return page, nil
}

func (f *fakeSagas) Get(ctx context.Context, id string) (admin.SagaDetail, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, s := range f.sagas {
		if s.ID == id {
			return admin.SagaDetail{Saga: s}, nil
		}
	}
	return admin.SagaDetail{}, idem.ErrNotFound
}

func (f *fakeSagas) RetryStep(ctx context.Context, id, reason string) error {
	return f.set(id, "running")
}

func (f *fakeSagas) Resolve(ctx context.Context, id, note string) error {
	return f.set(id, "compensated")
}

func (f *fakeSagas) set(id, state string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i, s := range f.sagas {
		if s.ID == id {
			if s.State != "failed" {
				return fmt.Errorf("saga %s is %s: %w", id, s.State, admin.ErrConflict)
			}
			f.sagas[i].State = state
			return nil
		}
	}
	return idem.ErrNotFound
}

func (f *fakeSagas) state(id string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, s := range f.sagas {
		if s.ID == id {
			return s.State
		}
	}
	return ""
}

type fakeEffects struct{}

func (fakeEffects) List(ctx context.Context, q admin.EffectFilter) (admin.EffectPage, error) {
	return admin.EffectPage{Effects: []admin.Effect{{Key: "charge/o-9", State: admin.EffectFailed, Attempts: 4, Error: "card expired"}}}, nil
}
