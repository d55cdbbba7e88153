-- Many claims in one round trip: what Store.Claim sends when concurrent claims queue
-- up behind the ones already running (a group claim, like a group commit; see
-- idempg/group.go). The arrays hold one claim per index: scope, id, fingerprint,
-- lease µs, retention µs. Store sorts them by key, and the INSERT takes them in that
-- order, so that two groups sharing keys lock them in one order.
--
-- One statement inserts every key that has no row (ON CONFLICT DO NOTHING: a
-- duplicate writes and locks nothing), with token 0; only then does a second one
-- draw the new rows' tokens. As in "{{table}}_claim" (migration 002), a token is
-- drawn once its row holds the key: no other incarnation of any key of the group can
-- start until this transaction ends, so each new token is above every token its key
-- had before, whether that incarnation was released, swept, taken over or rolled
-- back. The answer is one row per claim that has a row, read after the draws: o_ours
-- says this call inserted the key (for a key given twice, both indexes say so; the
-- caller acquires with the first), the rest is what a duplicate sees. A claim with no
-- row (deleted meanwhile) or an expired one is for the caller to claim alone.
--
-- The only wait is the INSERT's, for a transaction elsewhere that holds a key's row
-- it has not committed (a ClaimTx's fresh key, say). lock_timeout bounds it, so that
-- one such key cannot hold up the group: the call fails (55P03) and the caller
-- claims each key of the group alone.
--
-- plan_cache_mode = force_generic_plan: with array parameters PL/pgSQL otherwise
-- plans its three statements again on every call (a custom plan is always deemed
-- cheaper than the generic one), which halved the groups' claims per second; the
-- generic plans are the index nested loops a custom plan finds.
CREATE OR REPLACE FUNCTION "{{table}}_claim_group"(p_scopes text[], p_ids text[], p_fps bytea[], p_leases bigint[], p_retentions bigint[])
RETURNS TABLE (o_n int, o_ours boolean, o_state smallint, o_fp bytea, o_token bigint, o_result bytea,
	o_created timestamptz, o_expires timestamptz, o_expired boolean)
LANGUAGE plpgsql SET lock_timeout = '50ms' SET plan_cache_mode = force_generic_plan AS $$
DECLARE
	v_scopes text[];
	v_ids text[];
BEGIN
	WITH ins AS (
		INSERT INTO "{{table}}" AS r (scope, id, state, fingerprint, token, retention, created_at, expires_at)
		SELECT k.s, k.i, 1, COALESCE(k.f, ''::bytea), 0, k.r * interval '1 microsecond',
			clock_timestamp(), clock_timestamp() + k.l * interval '1 microsecond'
		FROM unnest(p_scopes, p_ids, p_fps, p_leases, p_retentions) WITH ORDINALITY AS k(s, i, f, l, r, n)
		ORDER BY k.n
		ON CONFLICT (scope, id) DO NOTHING
		RETURNING r.scope, r.id
	)
	SELECT array_agg(ins.scope), array_agg(ins.id) INTO v_scopes, v_ids FROM ins;
	UPDATE "{{table}}" AS r SET token = nextval('"{{table}}_token_seq"')
	FROM unnest(v_scopes, v_ids) AS k(s, i)
	WHERE r.scope = k.s AND r.id = k.i;
	RETURN QUERY
	SELECT k.n::int, EXISTS (SELECT 1 FROM unnest(v_scopes, v_ids) AS m(s, i) WHERE m.s = k.s AND m.i = k.i),
		r.state, r.fingerprint, r.token, r.result, r.created_at, r.expires_at, r.expires_at <= clock_timestamp()
	FROM unnest(p_scopes, p_ids) WITH ORDINALITY AS k(s, i, n)
	JOIN "{{table}}" AS r ON r.scope = k.s AND r.id = k.i;
END
$$;
