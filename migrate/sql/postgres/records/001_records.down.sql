-- Drops the records table; its token sequence goes with it (OWNED BY).
DROP TABLE IF EXISTS "{{table}}";
DROP SEQUENCE IF EXISTS "{{table}}_token_seq";
