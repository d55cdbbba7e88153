DROP INDEX IF EXISTS idem_sagas_done;
