package idemsqs_test

import (
	"context"
	"database/sql"
	"log/slog"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/idemsqlite"
	"github.com/idemhq/idem/inbox"
)

// ledger is an inbox on SQLite whose effect is one ledger row per message, fed by a
// source that counts what the broker delivered.
type ledger struct {
	db       *sql.DB
	consumer *inbox.Consumer[*sql.Tx]
	txdb     idemsql.TxDB[*sql.Tx]
	src      *countingSource
}

func newLedger(t *testing.T, src idem.Source) *ledger {
	t.Helper()
	ctx := context.Background()
	store, err := idemsqlite.Open(ctx, filepath.Join(t.TempDir(), "ledger.db"), idemsqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	l := &ledger{db: store.DB(), src: &countingSource{Source: src, seen: map[string]int{}}}
	if _, err := l.db.Exec("CREATE TABLE ledger (msg_id TEXT NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	if l.txdb, err = idemsql.SQLDB(ctx, l.db); err != nil {
		t.Fatal(err)
	}
	apply := func(ctx context.Context, tx *sql.Tx, m idem.Message) error {
		_, err := tx.ExecContext(ctx, "INSERT INTO ledger (msg_id) VALUES ($1)", m.ID)
		return err
	}
	l.consumer, err = inbox.New(ctx, idem.Source(l.src), l.txdb, idem.TxStore[*sql.Tx](store), apply,
		inbox.Config{Consumer: "ledger", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// runUntil runs the consumer until cond holds, failing t after 30 s.
func (l *ledger) runUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- l.consumer.Run(ctx) }()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			cancel()
			<-errc
			t.Fatalf("after 30s: not yet %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	<-errc
}

// rows is how many ledger rows msg_id has.
func (l *ledger) rows(t *testing.T, id string) int {
	t.Helper()
	var n int
	if err := l.db.QueryRow("SELECT COUNT(*) FROM ledger WHERE msg_id = $1", id).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// countingSource counts the deliveries of each ID.
type countingSource struct {
	idem.Source
	mu   sync.Mutex
	seen map[string]int
}

func (s *countingSource) Receive(ctx context.Context, max int) ([]idem.Delivery, error) {
	ds, err := s.Source.Receive(ctx, max)
	s.mu.Lock()
	for _, d := range ds {
		s.seen[d.ID]++
	}
	s.mu.Unlock()
	return ds, err
}

func (s *countingSource) count(id string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.seen[id]
}

// settledQueue reports whether the queue holds no message, visible or in flight.
func settledQueue(t *testing.T, c *sqs.Client, url string) bool {
	t.Helper()
	out, err := c.GetQueueAttributes(context.Background(), &sqs.GetQueueAttributesInput{QueueUrl: aws.String(url),
		AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameAll}})
	if err != nil {
		t.Fatal(err)
	}
	a := out.Attributes
	return a["ApproximateNumberOfMessages"] == "0" && a["ApproximateNumberOfMessagesNotVisible"] == "0"
}

// sendRaw sends one message as another producer would, attributes as given.
func sendRaw(t *testing.T, c *sqs.Client, url, body, dedup, group string, attrs map[string]types.MessageAttributeValue) {
	t.Helper()
	in := &sqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String(body), MessageAttributes: attrs}
	if dedup != "" {
		in.MessageDeduplicationId, in.MessageGroupId = aws.String(dedup), aws.String(group)
	}
	if _, err := c.SendMessage(context.Background(), in); err != nil {
		t.Fatal(err)
	}
}

func str(s string) types.MessageAttributeValue {
	return types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(s)}
}
