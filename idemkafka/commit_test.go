package idemkafka_test

import (
	"testing"
	"time"

	"github.com/idemhq/idem/idemkafka"
	"github.com/idemhq/idem/internal/testsvc"
)

// TestAckCommitsPromptly: with a CommitInterval of an hour, acknowledged offsets
// still reach the group right after the Acks, without Close or Commit: a crash
// then redelivers only what was in flight. The unacknowledged record holds its
// partition's offset before it.
func TestAckCommitsPromptly(t *testing.T) {
	t.Parallel()
	f := setup(t, 1)
	f.publish(t, f.msgs(20, 1)...)
	src := newSourceConfig(t, idemkafka.SourceConfig{Brokers: f.c.ListenAddrs(), Group: f.group, Topics: []string{f.topic},
		CommitInterval: time.Hour, Options: fastGroup()})
	ds := receiveN(t, src, 20)
	ack(t, ds[:12]...)
	ack(t, ds[13:]...) // record 12 stays unacknowledged
	testsvc.Eventually(t, time.Minute, "the acknowledged prefix committed", func() bool { return f.committed(t)[0] == 12 })
	ack(t, ds[12])
	testsvc.Eventually(t, time.Minute, "every offset committed", func() bool { return f.committed(t)[0] == 20 })
}
