-- Sagas resolved by hand (saga.Admin.Resolve): the operator's note, the time, and
-- the state the saga was in. Operators page through sagas by state in id order
-- (saga.Admin.List): without (state, id) a listing of the few failed sagas reads
-- every saga.
CREATE TABLE IF NOT EXISTS idem_saga_resolutions (id TEXT PRIMARY KEY, previous_state TEXT NOT NULL,
	note TEXT NOT NULL, resolved_at BIGINT NOT NULL);
CREATE INDEX IF NOT EXISTS idem_sagas_state ON idem_sagas (state, id);
