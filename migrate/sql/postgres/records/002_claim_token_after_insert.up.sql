-- A fresh claim's token is drawn after its row is in the index, not before.
--
-- INSERT ... VALUES (nextval(...)) ... ON CONFLICT evaluates nextval first and only
-- then looks for a conflicting row, possibly waiting for a transaction that is
-- deleting it. That transaction may meanwhile claim and release the key itself, with
-- a later token; when it commits, the waiting insert goes in with its earlier token,
-- and the key's tokens go down. Drawing the token once the row holds the key (no
-- other incarnation can start until this one's transaction ends) makes every
-- incarnation's token larger than any earlier one's, whether that one was released,
-- swept, taken over or rolled back.
--
-- "{{table}}_claim"(scope, id, fingerprint, lease µs, retention µs) returns the new token, or
-- NULL when the key already has a row (the caller then reads it).
CREATE OR REPLACE FUNCTION "{{table}}_claim"(p_scope text, p_id text, p_fp bytea, p_lease bigint, p_retention bigint)
RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
	t bigint;
BEGIN
	INSERT INTO "{{table}}" (scope, id, state, fingerprint, token, retention, created_at, expires_at)
	VALUES (p_scope, p_id, 1, COALESCE(p_fp, ''::bytea), 0,
		p_retention * interval '1 microsecond', clock_timestamp(), clock_timestamp() + p_lease * interval '1 microsecond')
	ON CONFLICT (scope, id) DO NOTHING;
	IF NOT FOUND THEN
		RETURN NULL;
	END IF;
	UPDATE "{{table}}" SET token = nextval('"{{table}}_token_seq"') WHERE scope = p_scope AND id = p_id
	RETURNING token INTO t;
	RETURN t;
END
$$;
