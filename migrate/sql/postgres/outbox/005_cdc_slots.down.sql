-- The log-based relay then knows no slot it had: its next start is a first one (a
-- slot lost meanwhile goes unnoticed), and it creates the table again if its role may.
DROP TABLE IF EXISTS idem_cdc_slots;
