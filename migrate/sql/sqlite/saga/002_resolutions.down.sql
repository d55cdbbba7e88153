DROP INDEX IF EXISTS idem_sagas_state;
DROP TABLE IF EXISTS idem_saga_resolutions;
