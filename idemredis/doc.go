// Package idemredis is an idem.Store on Redis (7.0 or later): one record per key,
// claimed, completed and released by Lua scripts in one round trip each, and expired
// by Redis itself. It implements idem.BatchClaimer (many claims in one round trip)
// and idem.Renewer (a live holder extends its lease), and passes idemtest.StoreSuite
// like every other backend.
//
// Use it when many service replicas must share dedup state at low latency and the
// effect does not live in a SQL database. Where it does, prefer idempg or idemsqlite,
// whose claims commit in the same transaction as the effect.
//
// # Exactly-once results, at-least-once effects
//
// Redis cannot join the transaction of an effect that lives elsewhere. A worker that
// performs the effect and crashes before Complete leaves an in-progress record; when
// its lease ends the next claimant runs the effect again. The stored result is
// replayed exactly once per key, but an effect outside Redis is at-least-once unless
// it is itself idempotent (for example, it forwards a key derived from the idem key
// to the downstream API).
//
// Redis also acknowledges a write before replicas or the append-only file have it:
// after a crash or a failover, records written in the last moments may be gone and
// their keys claimed again. Run Redis with appendonly yes and appendfsync always if
// that window matters, and with maxmemory-policy noeviction: an evicted record is a
// forgotten key.
//
// # Keys
//
// Each record is one Redis key: Config.Prefix, the scope's length in bytes, the scope
// and the id, joined by colons:
//
//	idem:8:tenant-a:order-17
//
// The length makes the split unambiguous, so ("x", "y:z") and ("x:y", "z") are two
// keys; it also keeps keys readable in redis-cli (Store.Key returns the key of an
// idem.Key). Every script touches exactly one key, so the store works on Redis Cluster
// through a *redis.ClusterClient. Keys carry no hash tag, so a tenant's keys spread
// over the cluster instead of loading one node; a prefix with braces is refused.
//
// # Records
//
// A record is a Redis string: a 34-byte binary header (state, token, created and
// expiry times in µs, retention in ms, fingerprint length), the fingerprint and, once
// completed, the result bytes. A string was measured against a hash with short field
// names: a fresh claim as a hash (HGETALL, then HSET and PEXPIRE) took Redis about 1.6
// times the time of the string's single SET NX GET (7.1µs against 4.4µs per script
// call in INFO commandstats), and the string has no per-field overhead. A released
// key is a 9-byte tombstone (state and token).
//
// # Expiry instead of sweeping
//
// An in-progress record carries the lease as its TTL (PX); Complete replaces it with
// the retention the claim asked for, which the record stores from claim time. A record
// whose lease or retention has passed has simply vanished and its key is free. There
// is nothing to sweep, so the store has no idem.Sweeper. Durations are rounded up to
// whole milliseconds, with 1ms at least.
//
// # Clock and fencing tokens
//
// Every time comes from Redis TIME, read inside the scripts, so application servers
// with skewed clocks agree on when a lease ends. A fresh record's token is the TIME of
// its claim in microseconds. Tokens rise strictly per key:
//
//   - A takeover happens only after the old record expired. Its TTL was at least 1ms
//     from the moment its token (at most that moment's TIME) was issued, so TIME has
//     moved past the old token by then.
//   - Release does not delete the key. It turns the record into a tombstone that
//     keeps the token and the remaining TTL of the lease (SET KEEPTTL). A claim treats
//     a tombstone as absent but takes the key over with max(TIME, token+1). Once the
//     tombstone expires, the released lease has ended, and TIME has passed its token
//     as above.
//   - A completed record expires after its retention (1ms at least), with the same
//     argument.
//
// Renew rewrites a live holder's expiry and TTL to the new lease from now; the
// arguments above hold as they are, since a renewal only lengthens a record's life.
//
// This relies on the Redis clock not jumping back by more than a lease. A failover to
// a replica whose clock is behind, or a clock stepped back, could issue a token that
// an old holder still has; run Redis hosts with NTP slewing, not stepping.
//
// Tokens are microseconds since 1970, below 2^53 until the year 2255, so Lua's
// double-precision numbers hold them exactly. Scripts compare tokens as 8 raw bytes.
//
// # Inspection
//
// Store implements idem.Inspector and passes idemtest.InspectorSuite. Inspect is a
// GET; an expired record is already gone. Evict is one script: it replaces the
// record by a tombstone holding its token for one second, so a concurrent Complete
// runs wholly before or after it, the evicted holder's Complete and Renew get
// idem.ErrLeaseLost, and the key's next token is max(TIME, token+1) either way. List
// runs SCAN MATCH over the scope's key prefix (glob metacharacters escaped), COUNT
// the room left in the page: pages are unordered, may be short or empty before the last, and a key may
// come twice when Redis resizes its table between pages; the cursor is SCAN's, with
// the ids of a SCAN reply that did not fit the page. List needs a single node (or a
// failover client); a Cluster or Ring client is refused. Scopes (idem.ScopeLister)
// reads scopes out of the key names SCAN returns, with the same page rules as List.
//
// # Batches
//
// ClaimBatch sends one EVALSHA per claim in a single pipeline: one round trip (per
// node on a cluster), with each claim still atomic on its own key. If Redis lost its
// script cache (a restart or a new node), the claims that got NOSCRIPT are sent again
// after SCRIPT LOAD; claims that ran are not repeated.
//
// # Sequences
//
// SeqTracker keeps idemseq windows (a watermark and a ring bitmap per producer) in one
// string per producer, updated by one script per check.
//
// # Streams
//
// StreamSink and StreamSource carry idem messages over Redis Streams with consumer
// groups: XADD with the fields StreamFieldID, StreamFieldPayload and
// StreamFieldHeaders (a layout services in other languages can read and write),
// XREADGROUP to receive, XACK to acknowledge, and XAUTOCLAIM to take over the pending
// entries of consumers that died. Streams do not deduplicate: the inbox does.
//
// # Push channels
//
// PushStore is the Redis stream.Store: the numbered channels a stream.Server
// pushes to browsers, one sorted set per channel appended to by one script. It
// is named for package stream's push, not for Redis Streams, which it does not
// use.
//
// # Tracing
//
// With a TracerProvider (Config.TracerProvider, else the global one once the
// application sets it), each Claim, Complete and Release is a client span,
// idem.store.claim, idem.store.complete or idem.store.release, a child of the
// caller's span, with idem.scope, idem.key, db.system.name "redis" and, for a claim,
// idem.outcome (idem.token when acquired, idem.duplicate when the key was taken);
// ClaimBatch is one idem.store.claim_batch span. With no provider set, no span is
// started.
package idemredis
