-- The records table of idem.Store on MySQL 8.0 / MariaDB 10.6 and later (idemmysql).
-- {{table}} is Config.Table. Times are microseconds since the Unix epoch of the
-- server's UTC clock, so no session time zone can move them.
CREATE TABLE IF NOT EXISTS `{{table}}` (
	scope        VARBINARY(255) NOT NULL,
	id           VARBINARY(255) NOT NULL,
	state        TINYINT        NOT NULL,            -- 1 in progress, 2 completed
	fingerprint  VARBINARY(64)  NOT NULL DEFAULT '',
	token        BIGINT         NOT NULL,            -- from {{table}}_tokens, drawn once the row holds the key
	result       LONGBLOB       NULL,                -- NULL while in progress
	retention_us BIGINT         NOT NULL,            -- applied by Complete
	created_us   BIGINT         NOT NULL,
	expires_us   BIGINT         NOT NULL,            -- lease end, then retention end
	PRIMARY KEY (scope, id),
	KEY `{{table}}_expires` (expires_us)
) ENGINE=InnoDB;

-- Fencing tokens. On MariaDB they come from a sequence: NEXTVAL hands values out in
-- rising order from one cache all connections share, never twice, not even to a
-- transaction that rolls back (a restart skips the rest of the cache). The /*M! */
-- comment runs on MariaDB only. MySQL has no sequences: there each draw inserts a
-- row here and takes its AUTO_INCREMENT id, which has the same properties, at about
-- three times the cost; the sweeper deletes old rows. The store uses the sequence
-- where it exists.
/*M! CREATE SEQUENCE IF NOT EXISTS `{{table}}_token_seq` CACHE 1000 */;
CREATE TABLE IF NOT EXISTS `{{table}}_tokens` (
	id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY
) ENGINE=InnoDB;
