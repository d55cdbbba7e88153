DROP TABLE IF EXISTS idem_effects;
