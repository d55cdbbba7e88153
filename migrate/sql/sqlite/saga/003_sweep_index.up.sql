-- The retention sweeper (saga.Sweeper, Admin.Purge) deletes finished sagas
-- (completed, compensated, resolved) whose last change is older than the
-- retention, a batch at a time. Partial: only finished sagas are in it.
CREATE INDEX IF NOT EXISTS idem_sagas_done ON idem_sagas (updated_at) WHERE state IN ('completed', 'compensated', 'resolved');
