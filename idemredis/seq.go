package idemredis

import (
	"context"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemseq"
)

// SeqTracker is an idemseq.Tracker keeping each producer's window in one Redis string:
// a 24-byte header (epoch, next, window size) followed by the ring bitmap, updated by
// one Lua script per check, so concurrent checks of a producer are atomic. Its state is
// Window/8 + 24 bytes per producer (152 bytes at the default window). Numbers and
// epochs are capped at idemseq.MaxSeq, which the script's float64 arithmetic counts
// exactly.
//
// Redis's own durability applies: without AOF (appendfsync always), a Redis restart
// can forget recent numbers, after which their redeliveries are accepted again. Where
// the effect lives in SQL, idemseq.SQLTracker records the number in the effect's
// transaction instead.
type SeqTracker struct {
	client   redis.UniversalClient
	prefix   string
	cfg      idemseq.Config
	check    *redis.Script
	register *redis.Script
}

var _ idemseq.Tracker = (*SeqTracker)(nil)

// NewSeqTracker returns a tracker on client whose keys start with prefix (DefaultPrefix
// when empty; the same rules as Config.Prefix) followed by "seq:".
func NewSeqTracker(client redis.UniversalClient, cfg idemseq.Config, prefix string) (*SeqTracker, error) {
	if client == nil {
		return nil, &idem.InputError{Field: "client", Reason: "is nil",
			Fix: "pass a connected client, e.g. redis.NewClient(&redis.Options{Addr: \"localhost:6379\"})"}
	}
	rc, err := Config{Prefix: prefix}.withDefaults()
	if err != nil {
		return nil, err
	}
	if cfg, err = cfg.WithDefaults(); err != nil {
		return nil, err
	}
	return &SeqTracker{client: client, prefix: rc.Prefix + "seq:", cfg: cfg,
		check: redis.NewScript(seqCheckLua), register: redis.NewScript(seqRegisterLua)}, nil
}

// Key returns the Redis key holding producer's window.
func (t *SeqTracker) Key(producer string) string {
	return redisKey(t.prefix, idem.Key{Scope: t.cfg.Scope, ID: producer})
}

// Check implements idemseq.Tracker.
func (t *SeqTracker) Check(ctx context.Context, producer string, epoch, seq uint64) (idemseq.Verdict, error) {
	if err := idemseq.CheckArgs(producer, epoch, seq); err != nil {
		return 0, err
	}
	v, err := t.check.Run(ctx, t.client, []string{t.Key(producer)},
		strconv.FormatUint(epoch, 10), strconv.FormatUint(seq, 10), t.cfg.Window).Int()
	if err != nil {
		return 0, backendError("seq.check", err)
	}
	return idemseq.Verdict(v), nil
}

// Register implements idemseq.Tracker.
func (t *SeqTracker) Register(ctx context.Context, producer string) (idemseq.Registration, error) {
	if err := idemseq.CheckArgs(producer, 0, 0); err != nil {
		return idemseq.Registration{}, err
	}
	r, err := t.register.Run(ctx, t.client, []string{t.Key(producer)}, t.cfg.Window).Int64Slice()
	if err != nil {
		return idemseq.Registration{}, backendError("seq.register", err)
	}
	return idemseq.Registration{Producer: producer, Epoch: uint64(r[0]), Next: uint64(r[1])}, nil
}

// The header: epoch (i64 at bit 0), next (i64 at bit 64), window size (u32 at bit 128);
// the ring bitmap starts at bit 192. Verdict codes are idemseq's: 1 accepted,
// 2 duplicate, 3 too old, 4 fenced. A window saved under another size is re-laid,
// keeping the numbers both sizes cover, as idemseq.Window.Load does.
const seqLuaCommon = `
local key, B = KEYS[1], 192
local function int(x) return string.format('%d', x) end
local function header()
  local h = redis.call('BITFIELD', key, 'GET', 'i64', 0, 'GET', 'i64', 64, 'GET', 'u32', 128)
  return h[1], h[2], h[3]
end
local function relayout(nx, old, size)
  local marks, span = {}, math.min(old, size)
  for s = math.max(nx - span, 0), nx - 1 do
    if redis.call('GETBIT', key, B + s % old) == 1 then marks[#marks + 1] = s end
  end
  redis.call('SET', key, redis.call('GETRANGE', key, 0, B / 8 - 1))
  for _, s in ipairs(marks) do redis.call('SETBIT', key, B + s % size, 1) end
  redis.call('BITFIELD', key, 'SET', 'u32', 128, int(size))
end
`

const seqCheckLua = seqLuaCommon + `
local epoch, seq, size = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local e, nx, sz = header()
if sz ~= 0 and sz ~= size then relayout(nx, sz, size) end
if epoch < e then return 4 end
local changed, verdict = epoch > e, 1
if seq >= nx then
  if seq - nx + 1 >= size then
    redis.call('SETRANGE', key, B / 8, string.rep('\0', size / 8))
  else
    for s = nx, seq do redis.call('SETBIT', key, B + s % size, 0) end
  end
  redis.call('SETBIT', key, B + seq % size, 1)
  nx, changed = seq + 1, true
elseif nx - seq > size then
  verdict = 3
elseif redis.call('GETBIT', key, B + seq % size) == 1 then
  verdict = 2
else
  redis.call('SETBIT', key, B + seq % size, 1)
  changed = true
end
if changed then
  redis.call('BITFIELD', key, 'SET', 'i64', 0, int(epoch), 'SET', 'i64', 64, int(nx), 'SET', 'u32', 128, int(size))
end
return verdict
`

const seqRegisterLua = seqLuaCommon + `
local size = tonumber(ARGV[1])
local e, nx, sz = header()
if sz ~= 0 and sz ~= size then relayout(nx, sz, size) end
if e >= 9007199254740991 then return redis.error_reply('producer has exhausted its epochs: register under a new name') end
redis.call('BITFIELD', key, 'SET', 'i64', 0, int(e + 1), 'SET', 'u32', 128, int(size))
return {e + 1, nx}
`
