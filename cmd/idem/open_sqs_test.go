package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem/idemsqs"
	"github.com/idemhq/idem/idemsqs/sqsfake"
)

// TestRelaySQLiteToSQS: the relay publishes the outbox to a FIFO queue at an
// SQS-compatible endpoint, with credentials from the AWS environment variables,
// which it never prints. (Not parallel: it sets the process's AWS_* variables.)
func TestRelaySQLiteToSQS(t *testing.T) {
	const secret = "wJalrXUtnFEMI-K7MDENG-bPxRfiCYEXAMPLEKEY"
	t.Setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
	t.Setenv("AWS_SECRET_ACCESS_KEY", secret)
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true") // never look for an instance role off this machine
	t.Setenv("AWS_CONFIG_FILE", t.TempDir()+"/none")
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", t.TempDir()+"/none")
	srv, err := sqsfake.Start(sqsfake.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	ctx := context.Background()
	if _, err := idemsqs.EnsureQueue(ctx, srv.Client(), "relaytest.fifo", idemsqs.QueueConfig{}); err != nil {
		t.Fatal(err)
	}
	path, _, enqueue := sqliteOutbox(t, "relaytest.fifo")
	enqueue("k1", "k2")
	r := startRelay(t, "--db", "sqlite:"+path, "--sink", "sqs://"+strings.TrimPrefix(srv.URL(), "http://"), "--poll", "50ms")

	src, err := idemsqs.NewSource(ctx, srv.Client(), idemsqs.SourceConfig{Queue: "relaytest.fifo"})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	rctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	var ids []string
	for len(ids) < 2 && rctx.Err() == nil {
		ds, _ := src.Receive(rctx, 10)
		for _, d := range ds {
			ids = append(ids, d.ID)
			_ = d.Settler.Ack(ctx)
		}
	}
	if strings.Join(ids, ",") != "k1,k2" {
		t.Fatalf("queue held %v, want k1 then k2\n%s", ids, r.stderr)
	}
	r.checkHTTP(t, 2)
	r.stop(t)
	if strings.Contains(r.stderr.String(), secret) {
		t.Fatalf("the relay printed the AWS secret key:\n%s", r.stderr)
	}
}
