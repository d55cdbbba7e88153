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
// their keys claimed again (see "Replication and failover" for what exactly, and
// Config.WaitReplicas against it). Run Redis with appendonly yes and appendfsync
// always if a restart's window matters, and with maxmemory-policy noeviction: an
// evicted record is a forgotten key.
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
// idem.Key).
//
// # Redis Cluster
//
// The store, the SeqTracker, the PushStore and the Redis Streams source and sink run
// on Redis Cluster through a *redis.ClusterClient, which follows MOVED and ASK
// redirections and reloads the slot map after a failover; the tests run every
// conformance suite on a cluster of three masters with a replica each, and kill a
// master during a run.
//
// Every script of the store and of the SeqTracker reads and writes exactly one key
// (a record, a producer's window), so its keys are in one slot by construction, and
// the keys carry no hash tag: the slot is the CRC16 of the whole key, so one tenant's
// (one scope's) keys spread over every shard, and a busy tenant is served by the
// whole cluster rather than capped at one shard's throughput. A hash tag on the scope
// would pin each scope to one slot, hence one shard: cheaper to list, but a hot
// tenant would then be a hot shard, and adding it would change every key, orphaning
// the records of a running deployment. A prefix with braces is refused, since it
// would put every key in one slot. ClaimBatch pipelines its claims; go-redis splits
// the pipeline by node, one round trip per master.
//
// A PushStore channel's keys (head, events, append keys, acks, times, clients) do
// share a slot: the channel is their hash tag (prefix{channel}:events), since its
// append and trim scripts touch several of them at once. Channels spread over the
// shards; a channel starting with '}' (an empty tag) is refused on a cluster. The
// set of channels Trim walks is one key, which a cluster Append writes with its own
// SADD before the append script. A Redis stream of StreamSink and StreamSource is
// one key, so one shard; spread load over several streams.
//
// List and Scopes walk the masters one after the other, in the order of the lowest
// slot each serves, with SCAN on each; the cursor names the shard by that slot and
// carries the master's SCAN cursor, so a walk survives a failover of the master it is
// on (the promoted replica serves the same slots) but, the replica's hash table being
// another, may then list some of that shard's keys twice or miss keys added during
// the walk, as SCAN does. A Ring client is refused.
//
// # Replication and failover
//
// Redis replicates asynchronously: a master acknowledges a write as soon as it has
// applied it, and sends it to its replicas after. If the master dies (or is cut off
// and its replica promoted) before a replica received a write, the write is gone
// from the cluster, although the caller was told it succeeded. For this store that
// means:
//
//   - a completed record lost: the key is claimable again once the failover is over,
//     and the next claimant runs the effect again (the one time idem's "exactly once
//     per key" fails);
//   - an acquired claim lost: a second worker can claim the key while the first
//     still performs the effect, and both run it;
//   - a renewal lost: the lease ends at its earlier time;
//   - a release lost: the key stays taken until its lease ends (harmless).
//
// The window is what the replica had not received when the master died: normally
// under a millisecond of writes, but unbounded when the link was slow or cut (a
// partition leaves the old master acknowledging writes until cluster-node-timeout
// makes it stop, unless min-replicas-to-write stops it earlier).
//
// Config.WaitReplicas closes it for the calls that matter. With WaitReplicas n,
// Claim, ClaimBatch, Complete and Renew send their script and then WAIT n on the
// same connection to the key's master, and fail (a retryable error wrapping
// ErrNotReplicated) unless n replicas acknowledged within Config.WaitTimeout: a call
// that returned nil has its write on n replicas. A failover promotes one of them
// when the master has n replicas in all (Redis Cluster promotes the replica with the
// most data; with more replicas than n, a lagging one could still win, so set n to
// the replica count per master for the guarantee). TestClusterFailoverKeepsWaitedCompletes
// cuts a replica off and then kills its master with SIGKILL during concurrent claims
// and completes, and finds every acknowledged completion afterwards (with
// WaitReplicas 0 the same run loses those the cut-off master acknowledged); TestClusterFailoverLosesUnwaitedWrites cuts a
// replica off and shows a Complete without WAIT lost by the failover, and a claim with
// WAIT refused. The costs: a round trip to the replica per call (BENCHMARKS.md), and,
// while a master has fewer than n live replicas (after a failover, until the old
// master returns as a replica), every waited call on its slots fails. A failed waited
// call may still have been applied on the master, like a call whose reply was lost;
// retrying it is safe (a retried Complete of the same token waits again). A call
// that wrote nothing (a claim that found the key taken, a Complete that found its
// lease lost) does not wait: its answer is read from the master and may show a
// record whose own writer is still waiting, or failed to get its WAIT met.
//
// A waited call bypasses the cluster client's routing (WAIT must follow the write
// on its connection): it goes to the master the slot map names and, after a MOVED,
// ASK or dead master, is sent again a few times as the map is reloaded; while a
// slot is being migrated (ASK), waited calls on it may fail, retryably, until the
// migration ends. WAIT is not durability on disk: a replica acknowledges what it
// holds in memory.
//
// On the server, min-replicas-to-write 1 with min-replicas-max-lag 10 makes a master
// refuse writes while it has no replica in sync, which bounds how long a partitioned
// old master accepts writes that will be lost; it does not close the window of
// writes in flight when a master dies, which only WAIT does. appendonly yes with
// appendfsync always protects against a restart, not against a failover.
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
// the ids of a SCAN reply that did not fit the page. On Redis Cluster List walks
// each master in turn (see "Redis Cluster"); a Ring client is refused. Scopes
// (idem.ScopeLister) reads scopes out of the key names SCAN returns, with the same
// page rules as List.
//
// # Batches
//
// ClaimBatch sends one EVALSHA per claim in a single pipeline: one round trip (per
// node on a cluster), with each claim still atomic on its own key. If Redis lost its
// script cache (a restart or a new node), the claims that got NOSCRIPT are sent again
// after SCRIPT LOAD; claims that ran are not repeated. With Config.WaitReplicas the
// pipeline of each master ends with one WAIT, which covers all its claims.
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
// StreamSinkConfig.Dedup adds a duplicate window at the sink, as JetStream's: a
// copy of a message appended within the window (an outbox relay's round published
// again after a crash) is dropped by one script with a marker key per message,
// so consumers never receive it.
//
// When an ack means stored: Redis answers XADD once the entry is in memory. It is
// on disk only with appendonly yes and appendfsync always (appendfsync everysec, the
// usual setting, loses up to a second of acknowledged entries on a crash of the
// machine, and RDB snapshots alone lose everything since the last one). Replicas
// receive the entry after the answer, so a failover can lose it even then: a
// StreamSink's ack does not survive a failover.
//
// # Streams lag
//
// StreamSource.Lag (idem.LagReporter) is XINFO GROUPS' lag plus pending for the
// group (XLEN before the group exists), Redis 7's exact counts. When Redis cannot
// compute the lag (entries deleted after the group's position, XGROUP SETID), Lag
// returns an error saying so instead of an estimate; after it has read past them,
// Redis 7.0's lag still counts the deleted entries, except that Lag reports 0 once
// the group has delivered the stream's last entry.
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
