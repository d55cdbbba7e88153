package idemmem

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/internal/cursor"
	"github.com/idemhq/idem/storekit"
)

// keyBytes is what the budget counts for a key's text kept for List: its bytes, two
// string headers and the map slot of its hash.
func keyBytes(k idem.Key) int64 { return int64(64 + len(k.Scope) + len(k.ID)) }

// remember keeps k's text under h (Config.KeepKeys); sh.mu is held.
func (s *Store) remember(sh *shard, h hkey, k idem.Key) {
	if !s.keepKeys {
		return
	}
	if _, ok := sh.keys[h]; !ok {
		sh.keys[h] = k
		s.charge(sh, keyBytes(k))
	}
}

// forget drops the text of h's key once its record is gone; sh.mu is held.
func (s *Store) forget(sh *shard, h hkey) {
	if k, ok := sh.keys[h]; ok {
		delete(sh.keys, h)
		s.charge(sh, -keyBytes(k))
	}
}

// record is r as the record of k, its bytes copied: what Inspect shows, and (through
// storekit.Existing) what a duplicate claim sees.
func (r liveRecord) record(k idem.Key) idem.Record {
	rec := idem.Record{
		Key:         k,
		State:       idem.StateInProgress,
		Fingerprint: bytes.Clone(r.fp),
		Token:       r.token,
		ExpiresAt:   time.Unix(0, r.deadline),
	}
	if r.created != 0 {
		rec.CreatedAt = time.Unix(0, r.created)
	}
	if r.completed {
		rec.State = idem.StateCompleted
		rec.Result = bytes.Clone(r.result)
		if rec.Result == nil {
			rec.Result = []byte{}
		}
	}
	return rec
}

// record returns h's record as stored, expired or not; sh.mu is held.
func (s *Store) record(sh *shard, h hkey, k idem.Key) (idem.Record, bool) {
	if r, ok := sh.live[h]; ok {
		return r.record(k), true
	}
	if d, ok := sh.done[h]; ok {
		// A compact record keeps neither its creation time nor a fingerprint.
		return idem.Record{Key: k, State: idem.StateCompleted, Token: d.token, Result: []byte{},
			ExpiresAt: time.Unix(0, s.doneDeadline(d))}, true
	}
	return idem.Record{}, false
}

// Inspect implements idem.Inspector.
func (s *Store) Inspect(ctx context.Context, k idem.Key) (idem.Record, error) {
	if err := storekit.CheckEvict(ctx, k); err != nil {
		return idem.Record{}, err
	}
	sh, h, _ := s.lockKey(k)
	defer sh.mu.Unlock()
	rec, ok := s.record(sh, h, k)
	if !ok {
		return idem.Record{}, idem.ErrNotFound
	}
	return rec, nil
}

// Evict implements idem.Inspector. The key's next claim draws its token from the
// shard's counter, above every token the shard issued, so an evicted holder stays
// fenced.
func (s *Store) Evict(ctx context.Context, k idem.Key, force bool) (idem.Record, error) {
	if err := storekit.CheckEvict(ctx, k); err != nil {
		return idem.Record{}, err
	}
	sh, h, _ := s.lockKey(k)
	defer sh.mu.Unlock()
	rec, ok := s.record(sh, h, k)
	switch {
	case !ok:
		return idem.Record{}, idem.ErrNotFound
	case rec.State == idem.StateInProgress && !force:
		return idem.Record{}, storekit.ErrForceNeeded(k)
	}
	if r, ok := sh.live[h]; ok {
		s.dropLive(sh, h, r)
	} else {
		delete(sh.done, h)
		s.charge(sh, -doneRecordBytes)
	}
	s.forget(sh, h)
	return rec, nil
}

// errNoKeys is List's error on a store without Config.KeepKeys.
var errNoKeys = errors.New("idemmem: the store remembers keys by hash only; set Config.KeepKeys to list them or their scopes")

// List implements idem.Inspector, on a store with Config.KeepKeys. The memory store
// has no index by scope: each page walks every key of the store, keeping the
// smallest ids above the cursor, which costs O(n log limit) for n records held, and
// then sorts the page. The cursor is the base64url of the page's last id; ids are in
// ascending byte order.
func (s *Store) List(ctx context.Context, scope, after string, limit int) (idem.KeyPage, error) {
	after, err := cursor.ListAfter(ctx, scope, after, limit)
	if err != nil {
		return idem.KeyPage{}, err
	}
	if !s.keepKeys {
		return idem.KeyPage{}, &idem.BackendError{Backend: backend, Op: "list", Err: errNoKeys}
	}
	// The limit+1 smallest ids above the cursor: one more than the page tells
	// whether another page follows.
	ids, err := s.smallest(ctx, limit+1, func(k idem.Key) (string, bool) { return k.ID, k.Scope == scope && k.ID > after })
	if err != nil {
		return idem.KeyPage{}, err
	}
	var page idem.KeyPage
	ids, page.Next = cursor.Trim(ids, limit, cursor.Self)
	for _, id := range ids {
		k := idem.Key{Scope: scope, ID: strings.Clone(id)}
		sh, h, _ := s.lockKey(k)
		rec, ok := s.record(sh, h, k)
		sh.mu.Unlock()
		if ok { // else evicted, released or swept since the walk
			page.Records = append(page.Records, rec)
		}
	}
	return page, nil
}

var _ idem.ScopeLister = (*Store)(nil)

// Scopes implements idem.ScopeLister, on a store with Config.KeepKeys (without it
// the store knows keys by hash only: a *idem.BackendError). Like List, each page
// walks every key of the store, keeping the smallest scopes above the cursor; scopes
// are in ascending byte order, each once. The cursor is the base64url of the page's
// last scope.
func (s *Store) Scopes(ctx context.Context, after string, limit int) (idem.ScopePage, error) {
	after, err := cursor.ScopesAfter(ctx, after, limit)
	if err != nil {
		return idem.ScopePage{}, err
	}
	if !s.keepKeys {
		return idem.ScopePage{}, &idem.BackendError{Backend: backend, Op: "scopes", Err: errNoKeys}
	}
	scopes, err := s.smallest(ctx, limit+1, func(k idem.Key) (string, bool) { return k.Scope, k.Scope > after })
	if err != nil {
		return idem.ScopePage{}, err
	}
	var page idem.ScopePage
	scopes, page.Next = cursor.Trim(scopes, limit, cursor.Self)
	for _, sc := range scopes {
		page.Scopes = append(page.Scopes, strings.Clone(sc))
	}
	return page, nil
}

// smallest walks every kept key, shard by shard, and returns the n smallest distinct
// values pick gives (ok false skips a key), sorted: O(keys · log n), with at most 4n
// values held between trims. The strings still share the keys' memory: clone what
// outlives the call.
func (s *Store) smallest(ctx context.Context, n int, pick func(idem.Key) (string, bool)) ([]string, error) {
	var vals []string
	trim := func() {
		slices.Sort(vals)
		vals = slices.Compact(vals)
		vals = vals[:min(len(vals), n)]
	}
	for i := range s.shards {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		sh := &s.shards[i]
		sh.mu.Lock()
		for _, k := range sh.keys {
			if v, ok := pick(k); ok {
				vals = append(vals, v)
				if len(vals) > 4*n {
					trim()
				}
			}
		}
		sh.mu.Unlock()
	}
	trim()
	return vals, nil
}
