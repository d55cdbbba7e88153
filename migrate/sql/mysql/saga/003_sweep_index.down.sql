DROP INDEX idem_sagas_done ON idem_sagas;
