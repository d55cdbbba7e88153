package idempg

import (
	"context"
	"strings"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/internal/otelx"
	"github.com/idemhq/idem/storekit"
)

// recordInsertSQL records fresh keys as completed in one statement, in key order so
// that concurrent batches lock rows in one order and cannot deadlock. It answers with
// the inserted ids joined by newlines (ids have no control characters), one row
// whatever the batch size, which both drivers scan alike.
//
// Parameters: $1 scopes, $2 ids, $3 fingerprints, $4 retentions µs (arrays, sorted),
// $5 results (an array of the same length, or NULL for none).
const recordInsertSQL = `
WITH ins AS (
	INSERT INTO {{table}} (scope, id, state, fingerprint, token, result, retention, created_at, expires_at)
	SELECT k.scope, k.id, 2, k.fp, nextval('{{seq}}'), COALESCE(($5::bytea[])[k.ord], ''::bytea), k.ret * interval '1 microsecond',
		clock_timestamp(), clock_timestamp() + k.ret * interval '1 microsecond'
	FROM unnest($1::text[], $2::text[], $3::bytea[], $4::bigint[]) WITH ORDINALITY AS k(scope, id, fp, ret, ord)
	ORDER BY k.ord
	ON CONFLICT (scope, id) DO NOTHING
	RETURNING scope, id
)
SELECT COALESCE(string_agg(length(scope) || ':' || scope || id, E'\n'), '') FROM ins`

// recordOneSQL is recordInsertSQL for a single key, as cheap as insertSQL: the
// common case of an inbox that commits each message alone.
//
// Parameters: $1 scope, $2 id, $3 fingerprint, $4 retention µs, $5 result (or NULL).
const recordOneSQL = `
INSERT INTO {{table}} (scope, id, state, fingerprint, token, result, retention, created_at, expires_at)
VALUES ($1, $2, 2, COALESCE($3::bytea, ''::bytea), nextval('{{seq}}'), COALESCE($5::bytea, ''::bytea),
	$4::bigint * interval '1 microsecond', clock_timestamp(), clock_timestamp() + $4::bigint * interval '1 microsecond')
ON CONFLICT (scope, id) DO NOTHING
RETURNING token`

// recordTakeoverSQL records an expired key as completed (see takeoverSQL).
//
// Parameters: $1 scope, $2 id, $3 fingerprint, $4 retention µs, $5 result (or NULL).
const recordTakeoverSQL = `
UPDATE {{table}} AS r SET
	state = 2, fingerprint = COALESCE($3::bytea, ''::bytea), token = nextval('{{seq}}'), result = COALESCE($5::bytea, ''::bytea),
	retention = $4::bigint * interval '1 microsecond', created_at = clk.now,
	expires_at = clk.now + $4::bigint * interval '1 microsecond'
FROM (SELECT clock_timestamp() AS now) clk
WHERE r.scope = $1::text AND r.id = $2::text AND r.expires_at <= clk.now
RETURNING r.token`

// RecordTx implements idem.TxRecorder: fresh keys cost one statement for the whole
// batch; each key found taken costs a read (and an expired one a takeover).
func (s *core[Tx]) RecordTx(ctx context.Context, tx Tx, claims []idem.Claim) ([]idem.Outcome, error) {
	return s.RecordResultsTx(ctx, tx, claims, nil)
}

// RecordResultsTx implements idem.TxResultRecorder: RecordTx, storing results[i] as
// the result of claims[i]'s key when it records it.
func (s *core[Tx]) RecordResultsTx(ctx context.Context, tx Tx, claims []idem.Claim, results [][]byte) (out []idem.Outcome, err error) {
	ctx, span := s.tr.Record(ctx, claims)
	defer func() { otelx.EndRecord(span, out, err) }()
	return s.recordBatch(ctx, tx, claims, results)
}

func (s *core[Tx]) recordBatch(ctx context.Context, tx Tx, claims []idem.Claim, results [][]byte) ([]idem.Outcome, error) {
	start := s.m.Start()
	cn := s.txConn(tx)
	if cn == nil {
		return nil, errNilTx
	}
	if err := storekit.CheckRecordBatch(ctx, claims, results); err != nil {
		return nil, err
	}
	order := storekit.KeyOrder(claims)
	out := make([]idem.Outcome, len(claims))
	var scopes, ids []string
	var fps, res [][]byte
	var rets []int64
	first := map[idem.Key]int{}
	for _, i := range order {
		c := claims[i].WithDefaults()
		if _, dup := first[c.Key]; dup {
			continue
		}
		first[c.Key] = i
		scopes, ids = append(scopes, c.Key.Scope), append(ids, c.Key.ID)
		fp := c.Fingerprint
		if fp == nil {
			fp = []byte{}
		}
		fps, rets = append(fps, fp), append(rets, micros(c.Retention))
		if results != nil {
			res = append(res, storekit.ResultAt(results, i))
		}
	}
	inserted := map[idem.Key]bool{}
	if len(ids) == 1 {
		_, acquired, err := scanInsert(cn.queryRow(ctx, s.q.recordOne, scopes[0], ids[0], fps[0], rets[0], storekit.ResultAt(res, 0)))
		if err != nil {
			return nil, backendErr(ctx, "record", err)
		}
		inserted[idem.Key{Scope: scopes[0], ID: ids[0]}] = acquired
	} else if err := s.recordMany(ctx, cn, scopes, ids, fps, rets, res, inserted); err != nil {
		return nil, err
	}
	for k, i := range first {
		if inserted[k] {
			out[i] = idem.Acquired
			continue
		}
		o, err := s.recordTaken(ctx, cn, claims[i], storekit.ResultAt(results, i))
		if err != nil {
			return nil, err
		}
		out[i] = o
	}
	storekit.FillRepeats(claims, out, first) // a repeat within the batch: its first occurrence decides
	for i, c := range claims {
		s.m.Claim(c.Key.Scope, out[i], nil, start)
	}
	return out, nil
}

// recordMany runs recordInsertSQL and marks the keys it inserted.
// res is nil or holds one result per key.
func (s *core[Tx]) recordMany(ctx context.Context, cn conn, scopes, ids []string, fps [][]byte, rets []int64, res [][]byte, inserted map[idem.Key]bool) error {
	var joined string
	if err := cn.queryRow(ctx, s.q.recordInsert, scopes, ids, fps, rets, res).Scan(&joined); err != nil {
		return backendErr(ctx, "record", err)
	}
	for _, line := range strings.Split(joined, "\n") {
		if k, ok := splitKey(line); ok {
			inserted[k] = true
		}
	}
	return nil
}

// splitKey parses one line of recordInsertSQL's answer: the scope's length, ':',
// the scope, then the id.
func splitKey(line string) (idem.Key, bool) {
	n, rest, ok := strings.Cut(line, ":")
	if !ok {
		return idem.Key{}, false
	}
	l := 0
	for _, d := range n {
		l = l*10 + int(d-'0')
	}
	if l > len(rest) {
		return idem.Key{}, false
	}
	return idem.Key{Scope: rest[:l], ID: rest[l:]}, true
}

// recordTaken answers for a key the batch insert found taken: a live duplicate, or
// an expired row taken over as completed.
func (s *core[Tx]) recordTaken(ctx context.Context, cn conn, c idem.Claim, result []byte) (idem.Outcome, error) {
	full := claimArgs(c) // scope, id, fingerprint, lease, retention
	args := []any{full[0], full[1], full[2], full[4], result}
	for range maxAttempts {
		res, st, err := scanExisting(cn.queryRow(ctx, s.q.read, c.Key.Scope, c.Key.ID), c)
		if err != nil {
			return 0, backendErr(ctx, "record", err)
		}
		switch st {
		case claimAnswered:
			return res.Outcome, nil
		case claimExpired:
			_, acquired, err := scanInsert(cn.queryRow(ctx, s.q.recordTakeover, args...))
			if err != nil {
				return 0, backendErr(ctx, "record", err)
			}
			if acquired {
				return idem.Acquired, nil
			}
		case claimNoRow: // released or swept since the insert: insert it alone
			fp := c.Fingerprint
			if fp == nil {
				fp = []byte{}
			}
			var joined string
			err := cn.queryRow(ctx, s.q.recordInsert, []string{c.Key.Scope}, []string{c.Key.ID}, [][]byte{fp},
				[]int64{micros(c.WithDefaults().Retention)}, [][]byte{result}).Scan(&joined)
			if err != nil {
				return 0, backendErr(ctx, "record", err)
			}
			if joined != "" {
				return idem.Acquired, nil
			}
		}
	}
	return 0, backendErr(ctx, "record", errChurn)
}
