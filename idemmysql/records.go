package idemmysql

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/storekit"
)

// nowUS is the server's UTC clock in microseconds since the epoch. MySQL evaluates it
// once per statement, when the statement starts (before it waits for any lock), so
// every use in one statement sees the same instant.
const nowUS = "TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6))"

// released is the lease end of a released row: 0, the Unix epoch, before every
// clock reading of every statement, however early it started.
const released = "0"

// noWait makes a statement fail at once (ER_LOCK_WAIT_TIMEOUT) instead of waiting
// for a row lock (MariaDB).
const noWait = "SET STATEMENT innodb_lock_wait_timeout = 0 FOR "

// queries are the store's statements with its table's names filled in.
type queries struct {
	insert, drawToken, nextToken, setToken, read, takeover string
	record, recordTakeover, callClaim, callClaimNoWait     string
	callGroup                                              string
	complete, release, renew, live                         string
	newestToken, sweepTokens                               string
}

func newQueries(table string) queries {
	r := strings.NewReplacer("{{t}}", quote(table), "{{tokens}}", quote(table+"_tokens"), "{{now}}", nowUS)
	return queries{
		// A duplicate key takes the existing row's exclusive lock (a no-op update),
		// where INSERT IGNORE would take a shared one: claimants of one key then queue
		// for the row instead of each holding a shared lock and deadlocking when they
		// upgrade it to take an expired row over.
		// The no-op update also hands the existing row's token to the statement's
		// LastInsertId, which a fresh insert leaves at 0 (the table has no
		// AUTO_INCREMENT column): that tells the two apart whatever the connection's
		// clientFoundRows does to the affected-row count.
		insert: r.Replace(`INSERT INTO {{t}} (scope, id, state, fingerprint, token, retention_us, created_us, expires_us)
			VALUES (?, ?, 1, ?, 0, ?, {{now}}, {{now}} + ?) ON DUPLICATE KEY UPDATE token = LAST_INSERT_ID(token)`),
		// record inserts a key as completed, with a token drawn before the insert:
		// a completed record has no holder to fence, and any later incarnation draws
		// after it. A duplicate is locked and told apart as in insert.
		record: r.Replace(`INSERT INTO {{t}} (scope, id, state, fingerprint, token, result, retention_us, created_us, expires_us)
			VALUES (?, ?, 2, ?, ?, ?, ?, {{now}}, {{now}} + ?) ON DUPLICATE KEY UPDATE token = LAST_INSERT_ID(token)`),
		recordTakeover: r.Replace(`UPDATE {{t}} SET state = 2, fingerprint = ?, token = ?, result = ?, retention_us = ?,
			created_us = {{now}}, expires_us = {{now}} + ? WHERE scope = ? AND id = ?`),
		callClaim: "CALL " + quote(table+"_claim") + "(?, ?, ?, ?, ?)",
		// The no-wait forms are MariaDB's, like the procedures: see group.go.
		callClaimNoWait: noWait + "CALL " + quote(table+"_claim") + "(?, ?, ?, ?, ?)",
		callGroup:       noWait + "CALL " + quote(table+"_claim_group") + "(?)",
		drawToken:       r.Replace(`INSERT INTO {{tokens}} () VALUES ()`),
		nextToken:       "SELECT NEXTVAL(" + quote(table+"_token_seq") + ")",
		setToken:        r.Replace(`UPDATE {{t}} SET token = ? WHERE scope = ? AND id = ?`),
		// The row the insert found and locked, read with the lock (so the newest
		// committed version, in every isolation level). Token 0 would mark this
		// transaction's own insert: a row is never committed without its token.
		read: r.Replace(`SELECT state, fingerprint, token, result, created_us, expires_us, expires_us <= {{now}}
			FROM {{t}} WHERE scope = ? AND id = ? FOR UPDATE`),
		takeover: r.Replace(`UPDATE {{t}} SET state = 1, fingerprint = ?, token = ?, result = NULL, retention_us = ?,
			created_us = {{now}}, expires_us = {{now}} + ? WHERE scope = ? AND id = ?`),
		// Assignments run left to right, each seeing the ones before: state changes
		// last, so result and expires_us test the state the row had. A row the same
		// token completed already keeps its first result.
		complete: r.Replace(`UPDATE {{t}} SET result = IF(state = 1, ?, result),
			expires_us = IF(state = 1, {{now}} + retention_us, expires_us), state = 2
			WHERE scope = ? AND id = ? AND token = ? AND expires_us > {{now}}`),
		// Release ends the lease instead of deleting the row: a transaction that
		// deletes a row and inserts it again deadlocks with the claimants waiting for
		// it. The sweeper deletes it. The lease ends at released (the epoch), not at
		// this statement's {{now}}: a statement reads the clock when it starts, before
		// it waits for a row lock, so a Complete or Renew of the same token that
		// started a moment before this Release and waited for its lock would test the
		// row against an earlier instant, find a lease ended at "now" still live, and
		// succeed after the Release had (issue 29 item 12).
		release: r.Replace(`UPDATE {{t}} SET expires_us = ` + released + `
			WHERE scope = ? AND id = ? AND token = ? AND state = 1 AND expires_us > {{now}}`),
		renew: r.Replace(`UPDATE {{t}} SET expires_us = {{now}} + ?
			WHERE scope = ? AND id = ? AND token = ? AND state = 1 AND expires_us > {{now}}`),
		// live explains a complete, release or renew that changed no row.
		live:        r.Replace(`SELECT token, state FROM {{t}} WHERE scope = ? AND id = ? AND expires_us > {{now}} FOR UPDATE`),
		newestToken: r.Replace(`SELECT MAX(id) FROM {{tokens}}`),
		sweepTokens: r.Replace(`DELETE FROM {{tokens}} WHERE id < ? ORDER BY id LIMIT ?`),
	}
}

const (
	stateInProgress = 1
	stateCompleted  = 2
)

// claim inserts the key or locks its row, then answers from the row: this
// transaction's insert gets its token, a live row is a duplicate, an expired one is
// taken over with a fresh token.
func (s *Store) claim(ctx context.Context, tx *sql.Tx, c idem.Claim) (idem.Result, error) {
	c = c.WithDefaults()
	fp := c.Fingerprint
	if fp == nil {
		fp = []byte{}
	}
	lease, retention := micros(c.Lease), micros(c.Retention)
	for range maxAttempts {
		r, err := tx.ExecContext(ctx, s.q.insert, c.Key.Scope, c.Key.ID, fp, retention, lease)
		if err != nil {
			return idem.Result{}, err
		}
		if existingToken, err := r.LastInsertId(); err != nil {
			return idem.Result{}, err
		} else if existingToken == 0 {
			return s.acquired(ctx, tx, c.Key)
		}
		res, st, err := s.existing(ctx, tx, c)
		switch {
		case err != nil:
			return idem.Result{}, err
		case st == rowOurs:
			return s.acquired(ctx, tx, c.Key)
		case st == rowGone:
			continue // swept between the two statements: insert again
		case st == rowLive:
			return res, nil
		}
		token, err := s.draw(ctx, tx)
		if err != nil {
			return idem.Result{}, err
		}
		if _, err := exec(ctx, tx, s.q.takeover, fp, token, retention, lease, c.Key.Scope, c.Key.ID); err != nil {
			return idem.Result{}, err
		}
		return idem.Result{Outcome: idem.Acquired, Token: uint64(token)}, nil
	}
	return idem.Result{}, errChurn
}

// acquired gives the row this transaction just inserted its token. The row's lock is
// held, so no later incarnation of the key can draw a token before this one.
func (s *Store) acquired(ctx context.Context, tx *sql.Tx, k idem.Key) (idem.Result, error) {
	token, err := s.draw(ctx, tx)
	if err != nil {
		return idem.Result{}, err
	}
	if _, err := exec(ctx, tx, s.q.setToken, token, k.Scope, k.ID); err != nil {
		return idem.Result{}, err
	}
	return idem.Result{Outcome: idem.Acquired, Token: uint64(token)}, nil
}

func (s *Store) draw(ctx context.Context, tx *sql.Tx) (token int64, err error) {
	if s.sequence {
		err = tx.QueryRowContext(ctx, s.q.nextToken).Scan(&token)
		return token, err
	}
	r, err := tx.ExecContext(ctx, s.q.drawToken)
	if err != nil {
		return 0, err
	}
	return r.LastInsertId()
}

// What the row after the insert is.
type rowStatus int

const (
	rowOurs    rowStatus = iota // inserted by this transaction: give it its token
	rowLive                     // a live duplicate: answered
	rowExpired                  // lease or retention passed: take it over
	rowGone                     // deleted in between
)

// existing reads the key's row under its lock.
func (s *Store) existing(ctx context.Context, tx *sql.Tx, c idem.Claim) (idem.Result, rowStatus, error) {
	var (
		state      int
		token      int64
		created, x int64
		expired    bool
		rec        idem.Record
	)
	err := tx.QueryRowContext(ctx, s.q.read, c.Key.Scope, c.Key.ID).
		Scan(&state, &rec.Fingerprint, &token, &rec.Result, &created, &x, &expired)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return idem.Result{}, rowGone, nil
	case err != nil:
		return idem.Result{}, rowGone, err
	case token == 0:
		return idem.Result{}, rowOurs, nil
	case expired:
		return idem.Result{}, rowExpired, nil
	}
	rec.State = idem.StateInProgress
	if state == stateCompleted {
		rec.State = idem.StateCompleted
	}
	rec.CreatedAt, rec.ExpiresAt = time.UnixMicro(created), time.UnixMicro(x)
	return storekit.Existing(c, rec), rowLive, nil
}

func (s *Store) complete(ctx context.Context, tx *sql.Tx, k idem.Key, token uint64, result []byte) error {
	if result == nil {
		result = []byte{}
	}
	// No row changed: a repeated Complete by the same token changes nothing, and
	// MySQL counts only changed rows.
	changed, held, state, err := s.change(ctx, tx, k, token, s.q.complete, result)
	switch {
	case changed:
		return nil
	case err != nil:
		return err
	case held && state == stateCompleted:
		return nil
	}
	return idem.ErrLeaseLost
}

func (s *Store) release(ctx context.Context, tx *sql.Tx, k idem.Key, token uint64) error {
	for range maxAttempts {
		changed, held, state, err := s.change(ctx, tx, k, token, s.q.release)
		switch {
		case changed:
			return nil
		case err != nil:
			return err
		case state == 0:
			return nil // nothing live to release
		case !held:
			return idem.ErrLeaseLost
		case state == stateCompleted:
			return idem.ErrCompleted
		}
		// Ours and in progress after all: it changed under the UPDATE; again.
	}
	return errChurn
}

func (s *Store) renew(ctx context.Context, tx *sql.Tx, k idem.Key, token uint64, lease time.Duration) error {
	changed, held, state, err := s.change(ctx, tx, k, token, s.q.renew, micros(lease))
	switch {
	case changed:
		return nil
	case err != nil:
		return err
	case !held:
		return idem.ErrLeaseLost
	case state == stateCompleted:
		return idem.ErrCompleted
	}
	return nil // ours and live: the new end equalled the old one to the microsecond
}

// change runs query (its arguments: first, then scope, id and token) on the key's
// row. When it changed no row, it reads the key's live row to say why: whether
// token holds it, and its state (0 for none).
func (s *Store) change(ctx context.Context, tx *sql.Tx, k idem.Key, token uint64, query string, first ...any) (changed, held bool, state int, err error) {
	n, err := exec(ctx, tx, query, append(first, k.Scope, k.ID, tokenArg(token))...)
	if err != nil || n == 1 {
		return err == nil, false, 0, err
	}
	held, state, err = s.live(ctx, tx, k, token)
	return false, held, state, err
}

// live reads the key's live row: whether token holds it, and its state (0 for none).
func (s *Store) live(ctx context.Context, tx *sql.Tx, k idem.Key, token uint64) (held bool, state int, err error) {
	var t int64
	err = tx.QueryRowContext(ctx, s.q.live, k.Scope, k.ID).Scan(&t, &state)
	if errors.Is(err, sql.ErrNoRows) {
		return false, 0, nil
	}
	return err == nil && t == tokenArg(token), state, err
}

// micros rounds d up to whole microseconds, the table's resolution, so a lease is
// never shorter than asked.
func micros(d time.Duration) int64 {
	us := int64(d / time.Microsecond)
	if d%time.Microsecond != 0 {
		us++
	}
	return us
}

// tokenArg maps a token to the BIGINT column. Tokens above MaxInt64 were never
// issued; they become negative, which no row holds, so they fence like any stranger.
func tokenArg(token uint64) int64 { return int64(token) }

// record records c's key as completed in tx, with result, or answers the row that
// holds it: one statement for a fresh key, where a claim and its completion take five.
func (s *Store) record(ctx context.Context, tx *sql.Tx, c idem.Claim, result []byte) (idem.Outcome, error) {
	c = c.WithDefaults()
	fp := c.Fingerprint
	if fp == nil {
		fp = []byte{}
	}
	if result == nil {
		result = []byte{}
	}
	retention := micros(c.Retention)
	for range maxAttempts {
		token, err := s.draw(ctx, tx)
		if err != nil {
			return 0, err
		}
		r, err := tx.ExecContext(ctx, s.q.record, c.Key.Scope, c.Key.ID, fp, token, result, retention, retention)
		if err != nil {
			return 0, err
		}
		if existing, err := r.LastInsertId(); err != nil {
			return 0, err
		} else if existing == 0 {
			return idem.Acquired, nil
		}
		res, st, err := s.existing(ctx, tx, c)
		switch {
		case err != nil:
			return 0, err
		case st == rowGone:
			continue
		case st == rowLive:
			return res.Outcome, nil
		}
		if _, err := exec(ctx, tx, s.q.recordTakeover, fp, token, result, retention, retention, c.Key.Scope, c.Key.ID); err != nil {
			return 0, err
		}
		return idem.Acquired, nil
	}
	return 0, errChurn
}
