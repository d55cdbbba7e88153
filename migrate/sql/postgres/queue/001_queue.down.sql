DROP TABLE IF EXISTS idem_queue_periodic;
DROP TABLE IF EXISTS idem_queue;
