-- A fresh claim in one round trip, on MariaDB (the /*M! */ statement; MySQL skips it
-- and idemmysql keeps sending the statements one by one). The procedure runs its own
-- transaction, so Store.Claim calls it and ClaimTx, inside the caller's transaction,
-- does not. It inserts the key, draws the token from the sequence only if the row is
-- new (while this transaction holds the row's lock, as the statements do), commits,
-- and answers the token, or 0 when the key was taken: the caller then reads the row.
-- The file uses the mysql client's DELIMITER, so it runs there as it is.
DELIMITER //
/*M! CREATE OR REPLACE PROCEDURE `{{table}}_claim`(IN p_scope VARBINARY(255), IN p_id VARBINARY(255),
	IN p_fp VARBINARY(64), IN p_lease BIGINT, IN p_retention BIGINT)
BEGIN
	DECLARE v_now BIGINT DEFAULT TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6));
	DECLARE v_token BIGINT DEFAULT 0;
	DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN ROLLBACK; RESIGNAL; END;
	START TRANSACTION;
	DO LAST_INSERT_ID(0);
	INSERT INTO `{{table}}` (scope, id, state, fingerprint, token, retention_us, created_us, expires_us)
		VALUES (p_scope, p_id, 1, p_fp, 0, p_retention, v_now, v_now + p_lease)
		ON DUPLICATE KEY UPDATE token = LAST_INSERT_ID(token);
	IF LAST_INSERT_ID() = 0 THEN
		SET v_token = NEXTVAL(`{{table}}_token_seq`);
		UPDATE `{{table}}` SET token = v_token WHERE scope = p_scope AND id = p_id;
	END IF;
	COMMIT;
	SELECT v_token;
END */ //
DELIMITER ;
