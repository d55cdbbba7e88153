DROP INDEX IF EXISTS idem_dead_letters_msg;
