DROP TABLE IF EXISTS idem_stream_clients;
DROP TABLE IF EXISTS idem_stream_events;
DROP TABLE IF EXISTS idem_stream_heads;
