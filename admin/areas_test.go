package admin_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/admin"
)

type deadLetterJSON struct {
	ID       int64         `json:"id"`
	Consumer string        `json:"consumer"`
	Reason   string        `json:"reason"`
	Payload  admin.Preview `json:"payload"`
}

func TestDeadLetters(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	var page struct {
		DeadLetters []deadLetterJSON `json:"deadletters"`
		Next        string           `json:"next"`
	}
	wantJSON(t, b.do(t, "GET", "/api/deadletters?consumer=orders&reason=declined&kind=permanent&since=2026-11-01T00:00:00Z&until=2026-12-01T00:00:00Z&limit=10", readToken, ""), &page)
	if len(page.DeadLetters) != 1 || page.DeadLetters[0].ID != 1 || page.DeadLetters[0].Payload.Preview != `{"order":1}` {
		t.Fatalf("page %+v", page)
	}
	if q := b.dl.lastQuery; q.Consumer != "orders" || q.Kind != "permanent" || q.ReasonContains != "declined" ||
		q.Since.Month() != 11 || q.Until.Month() != 12 || q.Limit != 10 {
		t.Errorf("filter %+v", q)
	}
	for target, detail := range map[string]string{
		"/api/deadletters?since=yesterday":                                       "since",
		"/api/deadletters?since=2026-12-01T00:00:00Z&until=2026-11-01T00:00:00Z": "until is not after since",
		"/api/deadletters?consumer=" + strings.Repeat("c", 256):                  "consumer is longer",
		"/api/deadletters/0":  "id",
		"/api/deadletters/x1": "id",
	} {
		wantProblem(t, b.do(t, "GET", target, readToken, ""), 400, admin.ProblemInvalid, detail)
	}

	var d deadLetterJSON
	wantJSON(t, b.do(t, "GET", "/api/deadletters/2", readToken, ""), &d)
	if d.Consumer != "billing" || d.Payload.Encoding != "hex" || d.Payload.Preview != "ff00" {
		t.Errorf("dead letter 2: %+v", d)
	}
	wantProblem(t, b.do(t, "GET", "/api/deadletters/99", readToken, ""), 404, admin.ProblemNotFound, "99")
	wantProblem(t, b.do(t, "GET", "/api/deadletters/2?full=1", readToken, ""), 403, admin.ProblemForbidden)

	var replay struct{ Results []admin.ReplayResult }
	wantJSON(t, b.do(t, "POST", "/api/deadletters/replay", fullToken, `{"ids":[1,2,3],"reason":"bug fixed"}`), &replay)
	got := []string{}
	for _, r := range replay.Results {
		got = append(got, r.Outcome)
	}
	if strings.Join(got, ",") != "replayed,already_applied,not_found" {
		t.Errorf("replay outcomes %v", got)
	}
	for body, detail := range map[string]string{
		`{"ids":[],"reason":"r"}`:    "ids is empty",
		`{"ids":[1,1],"reason":"r"}`: "twice",
		`{"ids":[-1],"reason":"r"}`:  "positive",
		`{"ids":[1]}`:                "reason is empty",
		`{"ids":[` + strings.Repeat("1,", admin.MaxReplayIDs) + `1],"reason":"r"}`: "at most 1000",
	} {
		wantProblem(t, b.do(t, "POST", "/api/deadletters/replay", fullToken, body), 400, admin.ProblemInvalid, detail)
	}

	wantProblem(t, b.do(t, "POST", "/api/deadletters/1/discard", fullToken, `{}`), 400, admin.ProblemInvalid, "reason is empty")
	wantJSON(t, b.do(t, "POST", "/api/deadletters/1/discard", fullToken, `{"reason":"duplicate order"}`), &admin.Done{})
	if b.dl.discarded[1] != "duplicate order" {
		t.Errorf("discarded %v", b.dl.discarded)
	}
	wantProblem(t, b.do(t, "POST", "/api/deadletters/1/discard", fullToken, `{"reason":"again"}`), 404, admin.ProblemNotFound, "1")

	recs := b.auditRecords(t)
	if what := recs[0]["what"].(map[string]any); len(what["ids"].([]any)) != 3 || recs[0]["why"] != "bug fixed" {
		t.Errorf("replay audit %v", recs[0])
	}
	if logs := b.logs.String(); strings.Contains(logs, `"order":1`) || strings.Contains(logs, `order\":1`) {
		t.Errorf("a payload is logged: %s", b.logs)
	}
}

func TestOutbox(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	var st admin.OutboxStatus
	wantJSON(t, b.do(t, "GET", "/api/outbox", readToken, ""), &st)
	if len(st.Partitions) != 1 || st.Partitions[0].Backlog != 3 || st.Parked != 1 || st.Relays[0].Published != 42 {
		t.Errorf("status %+v", st)
	}
	var parked struct {
		Messages []struct {
			ID      int64
			Payload admin.Preview
		}
		Next string
	}
	wantJSON(t, b.do(t, "GET", "/api/outbox/parked?limit=5&full=1", fullToken, ""), &parked)
	if len(parked.Messages) != 1 || parked.Messages[0].ID != 7 || string(parked.Messages[0].Payload.Full) != "hello" || parked.Next != "c2" {
		t.Errorf("parked %+v", parked)
	}
	wantJSON(t, b.do(t, "POST", "/api/outbox/parked/7/retry", fullToken, `{"reason":"broker is back"}`), &admin.Done{})
	wantJSON(t, b.do(t, "POST", "/api/outbox/parked/7/discard", fullToken, `{"reason":"obsolete"}`), &admin.Done{})
	wantProblem(t, b.do(t, "POST", "/api/outbox/parked/8/retry", fullToken, `{"reason":"r"}`), 404, admin.ProblemNotFound, "8")
	wantProblem(t, b.do(t, "POST", "/api/outbox/parked/8/discard", fullToken, `{"reason":"r"}`), 404, admin.ProblemNotFound, "8")
	b.ob.retry = func(context.Context, int64) error {
		return errors.New("message 7 is not parked: " + admin.ErrConflict.Error())
	}
	wantProblem(t, b.do(t, "POST", "/api/outbox/parked/7/retry", fullToken, `{"reason":"r"}`), 500, admin.ProblemInternal)
	b.ob.retry = func(context.Context, int64) error { return errorsJoin("message 7 is published", admin.ErrConflict) }
	wantProblem(t, b.do(t, "POST", "/api/outbox/parked/7/retry", fullToken, `{"reason":"r"}`), 409, admin.ProblemConflict, "published")
}

func errorsJoin(msg string, err error) error { return errors.Join(errors.New(msg), err) }

func TestEffects(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	var page admin.EffectPage
	wantJSON(t, b.do(t, "GET", "/api/effects?state=failed", readToken, ""), &page)
	if len(page.Effects) != 1 || page.Effects[0].State != "failed" {
		t.Errorf("effects %+v", page)
	}
	wantProblem(t, b.do(t, "GET", "/api/effects?state=done", readToken, ""), 400, admin.ProblemInvalid, "state", "pending_past_lease")
	b.ef.list = func(context.Context, admin.EffectFilter) (admin.EffectPage, error) {
		return admin.EffectPage{}, &idem.BackendError{Backend: "mysql", Op: "list", Err: errors.New("gone")}
	}
	wantProblem(t, b.do(t, "GET", "/api/effects", readToken, ""), 503, admin.ProblemUnavailable, "mysql")
}

func TestSagas(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	var page admin.SagaPage
	wantJSON(t, b.do(t, "GET", "/api/sagas?state=failed", readToken, ""), &page)
	if len(page.Sagas) != 1 || page.Sagas[0].ID != "s1" {
		t.Errorf("sagas %+v", page)
	}
	wantProblem(t, b.do(t, "GET", "/api/sagas?state=weird", readToken, ""), 400, admin.ProblemInvalid, "state")
	var s admin.SagaDetail
	wantJSON(t, b.do(t, "GET", "/api/sagas/s1", readToken, ""), &s)
	if s.Reason != "refund failed" || len(s.Steps) != 1 || s.Steps[0].Attempts != 3 {
		t.Errorf("saga %+v", s)
	}
	wantProblem(t, b.do(t, "GET", "/api/sagas/nope", readToken, ""), 404, admin.ProblemNotFound, `"nope"`)
	wantProblem(t, b.do(t, "GET", "/api/sagas/a%01b", readToken, ""), 400, admin.ProblemInvalid, "id has a control character")

	wantJSON(t, b.do(t, "POST", "/api/sagas/s1/retry", fullToken, `{"reason":"refund API is back"}`), &admin.Done{})
	wantProblem(t, b.do(t, "POST", "/api/sagas/done/retry", fullToken, `{"reason":"r"}`), 409, admin.ProblemConflict, "completed")
	wantProblem(t, b.do(t, "POST", "/api/sagas/sss/retry", fullToken, `{"reason":"r"}`), 404, admin.ProblemNotFound, `"sss"`)
	wantProblem(t, b.do(t, "POST", "/api/sagas/s1/resolve", fullToken, `{"reason":"r"}`), 400, admin.ProblemInvalid, "reason")
	wantProblem(t, b.do(t, "POST", "/api/sagas/s1/resolve", fullToken, `{"note":""}`), 400, admin.ProblemInvalid, "note is empty")
	wantJSON(t, b.do(t, "POST", "/api/sagas/s1/resolve", fullToken, `{"note":"refunded by hand"}`), &admin.Done{})
	recs := b.auditRecords(t)
	last := recs[len(recs)-1]
	if last["why"] != "refunded by hand" || last["what"].(map[string]any)["id"] != "s1" || last["route"] != "POST /api/sagas/{id}/resolve" {
		t.Errorf("resolve audit %v", last)
	}
}

func TestStream(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	var st admin.StreamStatus
	wantJSON(t, b.do(t, "GET", "/api/stream", readToken, ""), &st)
	if len(st.Channels) != 1 || st.Channels[0].LastSeq != 10 || st.Clients[0].Lag != 3 || st.Clients[0].AckedSeq != 7 {
		t.Errorf("stream %+v", st)
	}
	b.st.status = func(ctx context.Context) (admin.StreamStatus, error) {
		<-ctx.Done() // a backend that hangs until Config.Timeout
		return admin.StreamStatus{}, ctx.Err()
	}
	b2 := setup(t, func(c *admin.Config) { c.Stream, c.Timeout = b.st, 1 })
	wantProblem(t, b2.do(t, "GET", "/api/stream", readToken, ""), 504, admin.ProblemTimeout)
}
