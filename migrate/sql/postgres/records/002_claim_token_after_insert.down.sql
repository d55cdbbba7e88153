DROP FUNCTION IF EXISTS "{{table}}_claim"(text, text, bytea, bigint, bigint);
