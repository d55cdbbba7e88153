DROP FUNCTION IF EXISTS "{{table}}_claim_group"(text[], text[], bytea[], bigint[], bigint[]);
