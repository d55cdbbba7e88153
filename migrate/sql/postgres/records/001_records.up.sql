-- The records table of idem.Store on PostgreSQL. {{table}} is Config.Table (a lowercase
-- identifier); the sequence and the index are named after it.

-- Tokens come from one sequence for the whole table, so they rise across takeovers,
-- releases and expiry of a key: no earlier holder can ever present a matching token.
-- CACHE must stay 1: with per-session caches, a later claim in another session could
-- draw a lower token than an earlier one.
CREATE SEQUENCE IF NOT EXISTS "{{table}}_token_seq" AS bigint;

CREATE TABLE IF NOT EXISTS "{{table}}" (
    scope       text        NOT NULL,
    id          text        NOT NULL,
    state       smallint    NOT NULL CHECK (state IN (1, 2)), -- 1 in progress, 2 completed
    fingerprint bytea       NOT NULL DEFAULT '',
    token       bigint      NOT NULL,
    result      bytea,                                         -- NULL while in progress
    retention   interval    NOT NULL,                          -- applied by Complete
    created_at  timestamptz NOT NULL,
    expires_at  timestamptz NOT NULL,                          -- lease end, then retention end
    PRIMARY KEY (scope, id)
);

-- Dropping the table drops its sequence.
ALTER SEQUENCE "{{table}}_token_seq" OWNED BY "{{table}}".token;

-- The sweeper's range scan.
CREATE INDEX IF NOT EXISTS "{{table}}_expires_at_idx" ON "{{table}}" (expires_at);
