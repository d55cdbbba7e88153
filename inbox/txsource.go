package inbox

import (
	"context"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemsql"
)

// TxSource is a Source whose messages live in a database: package queue's
// Source, the database as the queue. When the consumer's TxDB reaches that same
// database (idemsql.TxDB.SameHandle: one *sql.DB or pgx pool), the consumer
// settles each delivery inside the transaction of its effect, so a message is
// retired if and only if its effect commits (or its dead letter, or the finding
// that its key was applied already): exactly once by construction, with the
// key's record as a second guard. The deliveries' Ack after the commit then costs
// nothing. A TxSource in another database is an ordinary Source: settled after
// the commit, at least once, the keys dropping what comes twice.
type TxSource[Tx any] interface {
	idem.Source
	// Database is the database the source's messages live in.
	Database() idemsql.TxDB[Tx]
	// SettleTx retires ds in tx, each with its outcome (idemsql.QueueApplied,
	// QueueDuplicate or QueueDead). Its error rolls tx back and every delivery
	// of the batch comes again: it fails when one of them is no longer this
	// consumer's to retire (its lease ran out and another consumer took it, or
	// it was cancelled), whose effect must then not commit.
	SettleTx(ctx context.Context, tx Tx, ds []idem.Delivery, outcomes []string) error
}

// settleTx retires, in tx, the items of a TxSource whose verdict is final in
// tx: processed, duplicate, or dead-lettered.
func (c *Consumer[Tx]) settleTx(ctx context.Context, tx Tx, items []item) error {
	if c.txs == nil {
		return nil
	}
	var ds []idem.Delivery
	var outs []string
	for i := range items {
		var out string
		switch items[i].v {
		case processed:
			out = idemsql.QueueApplied
		case duplicate:
			out = idemsql.QueueDuplicate
		case dead:
			out = idemsql.QueueDead
		default:
			continue
		}
		ds, outs = append(ds, items[i].d), append(outs, out)
	}
	if len(ds) == 0 {
		return nil
	}
	return c.txs.SettleTx(ctx, tx, ds, outs)
}
