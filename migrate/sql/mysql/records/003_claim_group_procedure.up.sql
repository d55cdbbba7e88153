-- Many fresh claims in one round trip, on MariaDB (MySQL skips the /*M! */ statement
-- and idemmysql claims one by one there): what Store.Claim sends when concurrent
-- claims queue up behind the ones already running (a group claim, like a group
-- commit). p_claims is a JSON array of {"s": scope, "i": id, "f": fingerprint, all
-- hex, "l": lease µs, "r": retention µs}, sorted by key so that two groups lock
-- their rows in one order.
--
-- One transaction inserts every key that has no row and locks those that have one;
-- only then does it draw the new rows' tokens (token 0 until then, as in
-- `{{table}}_claim`; a second INSERT, whose rows all exist by then, is the cheap
-- way to update many rows by key: a multi-table UPDATE joined to JSON_TABLE costs
-- 2 ms a call), between two more draws, v_floor and v_ceil. While the draws
-- run, every key of the group is locked by this transaction, so a token between
-- v_floor and v_ceil on a key of the group, in progress, is one this transaction
-- drew: the answer rows say so (ours), after the commit. A key's row read after the
-- commit that is not ours is what a duplicate sees; an expired or missing one is
-- claimed again by the caller, one by one.
DELIMITER //
/*M! CREATE OR REPLACE PROCEDURE `{{table}}_claim_group`(IN p_claims LONGTEXT)
BEGIN
	DECLARE v_floor BIGINT;
	DECLARE v_ceil BIGINT;
	DECLARE v_now BIGINT DEFAULT TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6));
	DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN ROLLBACK; RESIGNAL; END;
	START TRANSACTION;
	INSERT INTO `{{table}}` (scope, id, state, fingerprint, token, retention_us, created_us, expires_us)
		SELECT UNHEX(j.s), UNHEX(j.i), 1, UNHEX(j.f), 0, j.r, v_now, v_now + j.l
		FROM JSON_TABLE(p_claims, '$[*]' COLUMNS (n FOR ORDINALITY, s VARCHAR(510) PATH '$.s',
			i VARCHAR(510) PATH '$.i', f VARCHAR(128) PATH '$.f', l BIGINT PATH '$.l', r BIGINT PATH '$.r')) AS j
		ORDER BY j.n
		ON DUPLICATE KEY UPDATE token = token;
	SET v_floor = NEXTVAL(`{{table}}_token_seq`);
	INSERT INTO `{{table}}` (scope, id, state, fingerprint, token, retention_us, created_us, expires_us)
		SELECT UNHEX(j.s), UNHEX(j.i), 1, '', 0, 0, 0, 0
		FROM JSON_TABLE(p_claims, '$[*]' COLUMNS (n FOR ORDINALITY, s VARCHAR(510) PATH '$.s', i VARCHAR(510) PATH '$.i')) AS j
		ORDER BY j.n
		ON DUPLICATE KEY UPDATE token = IF(token = 0, NEXTVAL(`{{table}}_token_seq`), token);
	SET v_ceil = NEXTVAL(`{{table}}_token_seq`);
	COMMIT;
	SET v_now = TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6));
	SELECT j.n, t.state = 1 AND t.token > v_floor AND t.token < v_ceil, t.state, t.fingerprint, t.token,
			t.result, t.created_us, t.expires_us, t.expires_us <= v_now
		FROM JSON_TABLE(p_claims, '$[*]' COLUMNS (n FOR ORDINALITY, s VARCHAR(510) PATH '$.s', i VARCHAR(510) PATH '$.i')) AS j
		JOIN `{{table}}` AS t ON t.scope = UNHEX(j.s) AND t.id = UNHEX(j.i);
END */ //
DELIMITER ;
