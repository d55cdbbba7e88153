package idemredis

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/internal/cursor"
	"github.com/idemhq/idem/storekit"
	"github.com/redis/go-redis/v9"
)

var _ idem.Inspector = (*Store)(nil)

// evictLua: KEYS[1] record; ARGV force ("1" or "0"). Replies 0 for no record (or a
// released tombstone), {1, record} for an in-progress record left alone (no force),
// {2, record} for the record it evicted. An evicted record becomes a tombstone with
// its token for tombstoneMs: a claim within that time takes the key with
// max(TIME, token+1), and one after it finds TIME well past the token, so the key's
// next token is above the evicted holder's either way, and the holder's Complete and
// Renew, which need a live record of their token, get ErrLeaseLost. One script, so a
// concurrent Complete runs wholly before (its completed record is evicted) or after.
const evictLua = `
local v = redis.call('GET', KEYS[1])
if not v or string.byte(v, 1) == 0 then return 0 end
if string.byte(v, 1) == 1 and ARGV[1] ~= '1' then return {1, v} end
redis.call('SET', KEYS[1], '\0' .. string.sub(v, 2, 9), 'PX', ` + tombstoneMs + `)
return {2, v}
`

// tombstoneMs is how long an evicted record's tombstone lives: far longer than any
// lead a token can have over Redis's TIME.
const tombstoneMs = "1000"

var evictScript = redis.NewScript(evictLua)

// Inspect implements idem.Inspector in one GET. Redis deletes a record when its
// lease or retention ends, so an expired record is not found.
func (s *Store) Inspect(ctx context.Context, k idem.Key) (idem.Record, error) {
	if err := storekit.CheckEvict(ctx, k); err != nil {
		return idem.Record{}, err
	}
	v, err := s.client.Get(ctx, s.Key(k)).Result()
	if errors.Is(err, redis.Nil) {
		return idem.Record{}, idem.ErrNotFound
	}
	if err != nil {
		return idem.Record{}, backendError("inspect", err)
	}
	return inspected(k, v, "inspect")
}

// inspected decodes a stored value for Inspect and List: a tombstone is no record.
func inspected(k idem.Key, v, op string) (idem.Record, error) {
	if len(v) > 0 && v[0] == stateReleased {
		return idem.Record{}, idem.ErrNotFound
	}
	rec, err := decodeRecord(k, v)
	if err != nil {
		return idem.Record{}, backendError(op, err)
	}
	if len(rec.Fingerprint) == 0 {
		rec.Fingerprint = nil
	}
	return rec, nil
}

// Evict implements idem.Inspector in one script (see evictLua).
func (s *Store) Evict(ctx context.Context, k idem.Key, force bool) (idem.Record, error) {
	if err := storekit.CheckEvict(ctx, k); err != nil {
		return idem.Record{}, err
	}
	f := "0"
	if force {
		f = "1"
	}
	reply, err := evictScript.Run(ctx, s.client, []string{s.Key(k)}, f).Result()
	if err != nil {
		return idem.Record{}, backendError("evict", err)
	}
	a, ok := reply.([]any)
	if !ok {
		return idem.Record{}, idem.ErrNotFound
	}
	code, _ := a[0].(int64)
	v, _ := a[1].(string)
	rec, err := inspected(k, v, "evict")
	switch {
	case err != nil:
		return idem.Record{}, err
	case code == 1:
		return idem.Record{}, storekit.ErrForceNeeded(k)
	}
	return rec, nil
}

// maxScans bounds the SCAN calls of one List page, so that a page over a keyspace
// where the scope is sparse answers in bounded time (possibly empty, with a cursor).
const maxScans = 16

// maxCursorLen bounds a List cursor: a SCAN cursor and the ids of a SCAN reply that
// did not fit the page.
const maxCursorLen = 64 << 10

// List implements idem.Inspector with SCAN MATCH on the scope's key prefix (its
// glob metacharacters escaped) and COUNT the room left in the page, up to 16 SCAN
// calls per page. Pages
// are not ordered and may be shorter than limit, even empty before the last; a key
// Redis moves while its table is resized between pages may be listed twice (SCAN's
// own guarantee), so a caller that needs each key once keeps a set of ids. A SCAN
// reply longer than the room left in the page carries its rest in the cursor, which
// is the base64url of the SCAN cursor and those ids. Redis Cluster and Ring clients
// are refused: their keys are spread over nodes that one SCAN cursor does not cover.
func (s *Store) List(ctx context.Context, scope, after string, limit int) (idem.KeyPage, error) {
	if err := storekit.CheckList(ctx, scope, limit); err != nil {
		return idem.KeyPage{}, err
	}
	base := redisKey(s.prefix, idem.Key{Scope: scope})
	// COUNT is the room left: a reply overshoots it by a bucket's chain at most,
	// so the ids carried in the cursor stay few.
	ids, next, err := s.scanPage(ctx, "List", after, limit, escapeGlob(base)+"*",
		func(room int) int64 { return int64(room) },
		func(key string) (string, bool) { return strings.CutPrefix(key, base) })
	if err != nil {
		return idem.KeyPage{}, err
	}
	page := idem.KeyPage{Next: next}
	if len(ids) == 0 {
		return page, nil
	}
	pipe := s.client.Pipeline()
	gets := make([]*redis.StringCmd, len(ids))
	for i, id := range ids {
		gets[i] = pipe.Get(ctx, base+id)
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return idem.KeyPage{}, backendError("list", err)
	}
	for i, id := range ids {
		v, err := gets[i].Result()
		if errors.Is(err, redis.Nil) {
			continue // expired or evicted since the SCAN
		}
		if err != nil {
			return idem.KeyPage{}, backendError("list", err)
		}
		rec, err := inspected(idem.Key{Scope: scope, ID: id}, v, "list")
		if errors.Is(err, idem.ErrNotFound) {
			continue // released
		}
		if err != nil {
			return idem.KeyPage{}, err
		}
		page.Records = append(page.Records, rec)
	}
	return page, nil
}

// escapeGlob escapes the characters SCAN's MATCH gives a meaning to.
func escapeGlob(s string) string {
	return strings.NewReplacer(`\`, `\\`, `*`, `\*`, `?`, `\?`, `[`, `\[`, `]`, `\]`).Replace(s)
}

// encodeCursor writes a List cursor: the scan position (see scanPos) and the
// pending ids, one a line (ids hold no control characters), base64url.
func encodeCursor(pos scanPos, pending []string) (string, error) {
	text := pos.String()
	if len(pending) > 0 {
		text += "\n" + strings.Join(pending, "\n")
	}
	c := base64.RawURLEncoding.EncodeToString([]byte(text))
	if len(c) > maxCursorLen {
		return "", fmt.Errorf("a SCAN reply left %d ids over the page, more than a cursor holds; ask for a larger limit", len(pending))
	}
	return c, nil
}

// decodeCursor reads a cursor of encodeCursor made for sc's kind of client;
// finished is true when the walk is over and only pending ids are left. "" is the
// first page.
func decodeCursor(sc *scanner, c string) (pos scanPos, pending []string, finished bool, err error) {
	if c == "" {
		return sc.start(), nil, false, nil
	}
	bad := cursor.Invalid("is not a cursor this store made")
	if len(c) > maxCursorLen {
		return pos, nil, false, cursor.Invalid(fmt.Sprintf("is longer than %d bytes (got %d)", maxCursorLen, len(c)))
	}
	b, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		return pos, nil, false, bad
	}
	parts := strings.Split(string(b), "\n")
	pos, ok := parseScanPos(parts[0])
	if !ok || !sc.check(pos) {
		return pos, nil, false, bad
	}
	for _, id := range parts[1:] {
		if (idem.Key{Scope: "s", ID: id}).Validate() != nil {
			return pos, nil, false, bad
		}
	}
	pending = parts[1:]
	if pos.done() && len(pending) == 0 {
		// Only a first page starts a walk, and its cursor is "".
		return pos, nil, false, bad
	}
	return pos, pending, pos.done(), nil
}

var _ idem.ScopeLister = (*Store)(nil)

// minScopeScan is the least COUNT of a Scopes SCAN: a scope usually holds many
// keys, so asking for only the room left in the page would crawl.
const minScopeScan = 64

// Scopes implements idem.ScopeLister with SCAN MATCH on the store's prefix (its
// glob metacharacters escaped), up to 16 SCAN calls per page, reading each scope
// out of its keys' names (prefix, the scope's length, scope, id). Redis keeps no
// index of scopes, so pages are not ordered, may be shorter than limit, even empty
// before the last, and a scope repeats on every page whose SCAN reaches one of its
// keys: a caller that needs each scope once keeps a set. No scope present
// throughout the walk is missed. A scope whose records were all just evicted may
// still show while their tombstones live. Scopes that a SCAN reply holds beyond the
// page ride in the cursor, as List's ids do. Cluster and Ring clients are refused.
func (s *Store) Scopes(ctx context.Context, after string, limit int) (idem.ScopePage, error) {
	if err := storekit.CheckScopes(ctx, limit); err != nil {
		return idem.ScopePage{}, err
	}
	scopes, next, err := s.scanPage(ctx, "Scopes", after, limit, escapeGlob(s.prefix)+"[0-9]*",
		func(room int) int64 { return int64(max(room, minScopeScan)) },
		func(key string) (string, bool) { return scopeOf(s.prefix, key) })
	if err != nil {
		return idem.ScopePage{}, err
	}
	page := idem.ScopePage{Scopes: scopes, Next: next}
	return page, nil
}

// scopeOf reads the scope out of a record's Redis key (see redisKey); ok is false
// for a key of another shape under the same prefix.
func scopeOf(prefix, key string) (scope string, ok bool) {
	rest, ok := strings.CutPrefix(key, prefix)
	if !ok {
		return "", false
	}
	digits, rest, ok := strings.Cut(rest, ":")
	if !ok || len(digits) > 3 {
		return "", false
	}
	n, err := strconv.Atoi(digits)
	if err != nil || n <= 0 || n > idem.MaxKeyLen || len(rest) < n+2 || rest[n] != ':' {
		return "", false
	}
	scope = rest[:n]
	if (idem.Key{Scope: scope, ID: rest[n+1:]}).Validate() != nil {
		return "", false
	}
	return scope, true
}

// scanPage walks the keys matching pattern for a page of List or Scopes (method):
// up to maxScans SCAN calls, each of COUNT count(room left in the page), taking
// from each key the name that name reads (an id, a scope), each once per page.
// Names a SCAN reply holds beyond the page ride in the cursor with the SCAN
// cursor, and come first on the next page. Cluster and Ring clients are refused.
func (s *Store) scanPage(ctx context.Context, method, after string, limit int, pattern string,
	count func(room int) int64, name func(key string) (string, bool)) (names []string, next string, err error) {
	op := strings.ToLower(method)
	if _, ok := s.client.(*redis.Ring); ok {
		return nil, "", backendError(op, fmt.Errorf("%s needs one Redis node or a Redis Cluster; a %T spreads keys over nodes it cannot walk", method, s.client))
	}
	sc := &scanner{client: s.client}
	cur, pending, finished, err := decodeCursor(sc, after)
	if err != nil {
		return nil, "", err
	}
	n := min(len(pending), limit)
	names, pending = pending[:n:n], pending[n:]
	seen := make(map[string]bool, limit)
	for _, nm := range names {
		seen[nm] = true
	}
	for scans := 0; len(names) < limit && len(pending) == 0 && !finished && scans < maxScans; scans++ {
		keys, after, err := sc.step(ctx, cur, pattern, count(limit-len(names)))
		if err != nil {
			return nil, "", backendError(op, err)
		}
		for _, key := range keys {
			nm, ok := name(key)
			if !ok || seen[nm] {
				continue
			}
			seen[nm] = true
			if len(names) < limit {
				names = append(names, nm)
			} else {
				pending = append(pending, nm)
			}
		}
		cur, finished = after, after.done()
	}
	if !finished || len(pending) > 0 {
		if next, err = encodeCursor(cur, pending); err != nil {
			return nil, "", backendError(op, err)
		}
	}
	return names, next, nil
}
