-- The audit (package audit) reads the published messages of a window in keyset
-- order (published_at, id), a page at a time, and repairs a message a consumer
-- never got by publishing a copy of its row under the same msg_id.
--
-- Each repair is recorded: the copy's id, the original's, who missed it and why.
-- RepairsOf reads a page's originals from idem_outbox_repairs_orig alone.
CREATE TABLE IF NOT EXISTS idem_outbox_repairs (
	copy_id BIGINT PRIMARY KEY, orig_id BIGINT NOT NULL, msg_id TEXT NOT NULL, topic TEXT NOT NULL,
	consumers TEXT NOT NULL, reason TEXT NOT NULL, repaired_at BIGINT NOT NULL);
CREATE INDEX IF NOT EXISTS idem_outbox_repairs_orig ON idem_outbox_repairs (orig_id, repaired_at);
-- A page of the audit is one seek of this index and a range in its order. It
-- serves all that idem_outbox_published (published_at) did, the newest
-- publication (Stall) and the cleanup's range, so that one goes: the relay's
-- marks keep maintaining one index of the published rows, not two.
CREATE INDEX IF NOT EXISTS idem_outbox_published_id ON idem_outbox (published_at, id) WHERE published_at IS NOT NULL;
DROP INDEX IF EXISTS idem_outbox_published;
