package idempubsub_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idempubsub"
	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/idemsqlite"
	"github.com/idemhq/idem/inbox"
)

// TestBadInputDeadLetters: messages published by another tool straight to the
// topic (no ID attribute among 150 others, an oversized ID, an ID with a control
// character, a payload the handler cannot read) reach the inbox and are
// dead-lettered with their reasons; a good message beside them is applied once,
// without Pub/Sub's own "goog" attributes among its headers.
func TestBadInputDeadLetters(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	ctx := context.Background()
	topic, sub := f.topicSub(t, idempubsub.SubscriptionConfig{})
	many := map[string]string{}
	for i := range 150 {
		many[strings.Repeat("k", 200)+string(rune('a'+i%26))+strings.Repeat("x", i/26)] = strings.Repeat("v", 2000)
	}
	raw := []*pubsubpb.PubsubMessage{
		{Data: []byte(`{"Amount":1}`), Attributes: many},
		{Data: []byte(`{"Amount":2}`), Attributes: map[string]string{idem.HeaderID: strings.Repeat("x", 5000)}},
		{Data: []byte(`{"Amount":3}`), Attributes: map[string]string{idem.HeaderID: "bad\x01id"}},
		{Data: []byte(`not json`), Attributes: map[string]string{idem.HeaderID: "garbled"}},
		{Data: []byte(`{"Amount":5}`), Attributes: map[string]string{idem.HeaderID: "good", "googclient_traceparent": "x", "Trace-Id": "t1"}},
	}
	if _, err := f.client.TopicAdminClient.Publish(ctx, &pubsubpb.PublishRequest{
		Topic: "projects/" + testProject + "/topics/" + topic, Messages: raw}); err != nil {
		t.Fatal(err)
	}

	store, err := idemsqlite.Open(ctx, filepath.Join(t.TempDir(), "inbox.db"), idemsqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	db := store.DB()
	if _, err := db.Exec("CREATE TABLE ledger (msg_id TEXT NOT NULL, amount BIGINT NOT NULL, trace TEXT NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	txdb, err := idemsql.SQLDB(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	apply := func(ctx context.Context, tx *sql.Tx, m idem.Message) error {
		var p struct{ Amount int64 }
		if err := json.Unmarshal(m.Payload, &p); err != nil {
			return inbox.Permanent(err)
		}
		if _, ok := m.Headers["googclient_traceparent"]; ok {
			return inbox.Permanent(errTest("Pub/Sub's own attribute reached the handler"))
		}
		_, err := tx.ExecContext(ctx, "INSERT INTO ledger (msg_id, amount, trace) VALUES ($1, $2, $3)", m.ID, p.Amount, m.Headers["Trace-Id"])
		return err
	}
	src := f.source(t, idempubsub.SourceConfig{Subscription: sub})
	c, err := inbox.New(ctx, src, txdb, store, apply, inbox.Config{Consumer: "bad-input", MaxAttempts: 3,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	run, stop := context.WithTimeout(ctx, 60*time.Second)
	defer stop()
	done := make(chan error, 1)
	go func() { done <- c.Run(run) }()
	var dls []inbox.DeadLetter
	var rows int
	for run.Err() == nil {
		if dls, err = c.DeadLetters(ctx, 10); err != nil {
			t.Fatal(err)
		}
		if err := db.QueryRow("SELECT COUNT(*) FROM ledger").Scan(&rows); err != nil {
			t.Fatal(err)
		}
		if len(dls) >= 4 && rows >= 1 {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	stop()
	<-done
	if rows != 1 {
		t.Fatalf("ledger holds %d rows, want the good message once", rows)
	}
	var trace string
	if err := db.QueryRow("SELECT trace FROM ledger WHERE msg_id = 'good'").Scan(&trace); err != nil || trace != "t1" {
		t.Fatalf("good message's Trace-Id header arrived as %q (%v), want t1", trace, err)
	}
	want := map[string]string{ // a dead letter's kind and a phrase of its reason, by amount
		"1": "no_key:is empty", "2": "no_key:longer than", "3": "no_key:control character", "garbled": "permanent:invalid character",
	}
	if len(dls) != len(want) {
		t.Fatalf("%d dead letters, want %d: %+v", len(dls), len(want), dls)
	}
	for _, dl := range dls {
		which := "garbled"
		if dl.Message.ID != "garbled" {
			var p struct{ Amount json.Number }
			_ = json.Unmarshal(dl.Message.Payload, &p)
			which = p.Amount.String()
		}
		kind, phrase, _ := strings.Cut(want[which], ":")
		if dl.Kind != kind || !strings.Contains(dl.Reason, phrase) || dl.Position == "" {
			t.Errorf("dead letter %s: kind %q, reason %q, position %q; want kind %s, a reason with %q and a position",
				which, dl.Kind, dl.Reason, dl.Position, kind, phrase)
		}
	}
}

type errTest string

func (e errTest) Error() string { return string(e) }
