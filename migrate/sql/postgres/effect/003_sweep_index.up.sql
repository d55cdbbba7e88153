-- The retention sweeper (effect.Sweeper, Admin.Purge) deletes complete effects
-- whose last change is older than the retention, oldest first, a batch at a time.
-- Without this index each batch reads the table. Partial: only complete effects,
-- the ones a sweep may delete, are in it.
CREATE INDEX IF NOT EXISTS idem_effects_done ON idem_effects (updated_at) WHERE state = 'complete';
