-- Operators list the effects that are not complete (pending ones, those past their
-- lease that a recovery would take over, failed ones: effect.Admin.List), page by
-- page in (key, step) order. Without this index such a listing reads every effect
-- ever recorded, nearly all of them complete. Partial: complete effects, the bulk
-- of the table, are not in it, so it costs writes only while an effect is open.
CREATE INDEX IF NOT EXISTS idem_effects_open ON idem_effects (state, key, step) WHERE state <> 'complete';
