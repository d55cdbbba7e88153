DROP INDEX idem_sagas_state ON idem_sagas;
DROP TABLE IF EXISTS idem_saga_resolutions;
