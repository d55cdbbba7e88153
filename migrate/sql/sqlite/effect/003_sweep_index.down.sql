DROP INDEX IF EXISTS idem_effects_done;
