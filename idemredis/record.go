package idemredis

import (
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/storekit"
)

// A record is one Redis string (see the package doc for why not a hash):
//
//	offset  size  field
//	0       1     state: stateReleased, stateInProgress or stateCompleted
//	1       8     token, big-endian
//	9       8     created, µs since the Unix epoch (Redis TIME)
//	17      8     expires, µs: end of the lease, or of the retention once completed
//	25      8     retention in ms, applied by Complete
//	33      1     fingerprint length n
//	34      n     fingerprint
//	34+n    …     result (completed records only)
//
// A released tombstone is only the first 9 bytes: state and token.
const (
	stateReleased   = 0
	stateInProgress = 1
	stateCompleted  = 2

	headerLen = 34
)

// Script replies of complete and release.
const (
	replyLeaseLost = 0
	replyOK        = 1
	replyCompleted = 2
)

// The Lua offsets below are the layout above plus one (Lua strings start at 1).
// struct.pack's I8 goes through a Lua number (a double): exact for every value the
// scripts write, since µs since 1970 stay below 2^53 until the year 2255.

// claimLua: KEYS[1] record; ARGV fingerprint, lease ms, retention ms. Replies the
// new token (an integer) when acquired, else the live record (a string) for the
// caller to decode: whether it is a Mismatch is decided in Go, as it writes nothing.
//
// SET NX GET (Redis 7.0+) creates a fresh record and reads an existing one in one
// command: a fresh key, the hot path, costs TIME and one SET. Only over a released
// tombstone is the record written again, with the token above the tombstone's.
const claimLua = `
local t = redis.call('TIME')
local now = t[1] * 1000000 + t[2]
local lease = tonumber(ARGV[2])
local function record(token)
  return struct.pack('>BI8I8I8I8B', 1, token, now, now + lease * 1000, tonumber(ARGV[3]), #ARGV[1]) .. ARGV[1]
end
local v = redis.call('SET', KEYS[1], record(now), 'NX', 'GET', 'PX', lease)
if not v then return now end
if string.byte(v, 1) ~= 0 then return v end
local token = math.max(now, struct.unpack('>I8', v, 2) + 1)
redis.call('SET', KEYS[1], record(token), 'PX', lease)
return token
`

// completeLua: KEYS[1] record; ARGV token (8 bytes), result. Tokens are compared as
// bytes, so no precision is lost on a token the store never issued. Completing a
// record already completed with the token writes it again unchanged (KEEPTTL): the
// write is what a WAIT after it waits for, so a retried Complete whose first WAIT
// fell short is acknowledged only once a replica has the record.
const completeLua = `
local v = redis.call('GET', KEYS[1])
if not v or string.sub(v, 2, 9) ~= ARGV[1] then return 0 end
local state = string.byte(v, 1)
if state == 2 then
  redis.call('SET', KEYS[1], v, 'KEEPTTL')
  return 1
end
if state ~= 1 then return 0 end
local ret = struct.unpack('>I8', v, 26)
local t = redis.call('TIME')
local now = t[1] * 1000000 + t[2]
redis.call('SET', KEYS[1], '\2' .. string.sub(v, 2, 17) .. struct.pack('>I8', now + ret * 1000) .. string.sub(v, 26, 34 + string.byte(v, 34)) .. ARGV[2], 'PX', ret)
return 1
`

// releaseLua: KEYS[1] record; ARGV token (8 bytes). The tombstone keeps the token and
// the key's remaining TTL (KEEPTTL): see "Fencing tokens" in the package doc.
const releaseLua = `
local v = redis.call('GET', KEYS[1])
if not v then return 1 end
local state = string.byte(v, 1)
if state == 0 then return 1 end
if string.sub(v, 2, 9) ~= ARGV[1] then return 0 end
if state == 2 then return 2 end
redis.call('SET', KEYS[1], '\0' .. ARGV[1], 'KEEPTTL')
return 1
`

// renewLua: KEYS[1] record; ARGV token (8 bytes), lease ms. Rewrites the expiry of
// the holder's in-progress record and its TTL to the lease from now. A tombstone or
// a missing key means the lease was released or ran out.
const renewLua = `
local v = redis.call('GET', KEYS[1])
if not v or string.sub(v, 2, 9) ~= ARGV[1] then return 0 end
local state = string.byte(v, 1)
if state == 2 then return 2 end
if state ~= 1 then return 0 end
local lease = tonumber(ARGV[2])
local t = redis.call('TIME')
local now = t[1] * 1000000 + t[2]
redis.call('SET', KEYS[1], string.sub(v, 1, 17) .. struct.pack('>I8', now + lease * 1000) .. string.sub(v, 26), 'PX', lease)
return 1
`

// tokenArg encodes a token as the scripts compare it.
func tokenArg(token uint64) []byte {
	return binary.BigEndian.AppendUint64(make([]byte, 0, 8), token)
}

// millis converts d to whole milliseconds for PX, rounding up and never below 1ms:
// the token argument of the package doc needs every record to outlive 1ms.
func millis(d time.Duration) int64 {
	ms := int64((d + time.Millisecond - 1) / time.Millisecond)
	return max(ms, 1)
}

// decodeClaim turns the claim script's reply into a Result for c. What a duplicate
// may see (never the holder's token; the result only on Replayed) is storekit.Existing's
// decision, as in every backend.
func decodeClaim(c idem.Claim, reply any) (idem.Result, error) {
	switch v := reply.(type) {
	case int64:
		return idem.Result{Outcome: idem.Acquired, Token: uint64(v)}, nil
	case string:
		rec, err := decodeRecord(c.Key, v)
		if err != nil {
			return idem.Result{}, err
		}
		return storekit.Existing(c, rec), nil
	}
	return idem.Result{}, fmt.Errorf("unexpected claim script reply %T", reply)
}

func decodeRecord(k idem.Key, v string) (idem.Record, error) {
	if len(v) < headerLen || len(v) < headerLen+int(v[33]) {
		return idem.Record{}, fmt.Errorf("record of key %v is %d bytes, shorter than its header: "+
			"another program wrote to this key prefix", k, len(v))
	}
	u64 := func(off int) uint64 { return binary.BigEndian.Uint64([]byte(v[off : off+8])) }
	fpEnd := headerLen + int(v[33])
	rec := idem.Record{
		Key:       k,
		Token:     u64(1),
		CreatedAt: time.UnixMicro(int64(u64(9))),
		ExpiresAt: time.UnixMicro(int64(u64(17))),
	}
	if fpEnd > headerLen {
		rec.Fingerprint = []byte(v[headerLen:fpEnd])
	}
	switch v[0] {
	case stateInProgress:
		rec.State = idem.StateInProgress
	case stateCompleted:
		rec.State = idem.StateCompleted
		rec.Result = []byte(v[fpEnd:])
	default:
		return idem.Record{}, fmt.Errorf("record of key %v has unknown state %d: another program wrote to this key prefix", k, v[0])
	}
	return rec, nil
}

// redisKey builds the one Redis key of k: prefix, the scope's length, scope, id.
// The length makes the split unambiguous whatever the scope and id contain, so
// ("x", "y:z") and ("x:y", "z") get different keys; it also keeps keys readable:
// idem:8:tenant-a:order-17.
func redisKey(prefix string, k idem.Key) string {
	var b strings.Builder
	b.Grow(len(prefix) + len(k.Scope) + len(k.ID) + 5)
	b.WriteString(prefix)
	b.WriteString(strconv.Itoa(len(k.Scope)))
	b.WriteByte(':')
	b.WriteString(k.Scope)
	b.WriteByte(':')
	b.WriteString(k.ID)
	return b.String()
}
