-- The audit (package audit) reads the published messages of a window in keyset
-- order (published_at, id), a page at a time, and repairs a message a consumer
-- never got by publishing a copy of its row under the same msg_id. The pages
-- read idem_outbox_published (published_at), whose entries end with the rowid,
-- which id is: no other index is needed.
--
-- Each repair is recorded: the copy's id, the original's, who missed it and why.
-- RepairsOf reads a page's originals from idem_outbox_repairs_orig alone.
CREATE TABLE IF NOT EXISTS idem_outbox_repairs (
	copy_id INTEGER PRIMARY KEY, orig_id INTEGER NOT NULL, msg_id TEXT NOT NULL, topic TEXT NOT NULL,
	consumers TEXT NOT NULL, reason TEXT NOT NULL, repaired_at INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS idem_outbox_repairs_orig ON idem_outbox_repairs (orig_id, repaired_at);
