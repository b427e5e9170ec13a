package redisstore

import "github.com/redis/go-redis/v9"

// Both scripts take the same ARGV and return the same reply, so the Go side
// has one code path:
//
//	ARGV[1] limit L          ARGV[2] window W in µs    ARGV[3] n
//	ARGV[4] mode: 0 peek, 1 allow, 2 allow and record even when denied (penalty)
//	ARGV[5] now in µs, or "" to read the server's TIME
//	ARGV[6] key TTL in ms
//	reply:  {allowed 0|1, remaining, retryAfter µs, resetAfter µs}
//
// Time: the scripts read redis.call('TIME') so that every node is judged by
// one clock, whatever the skew between them. Redis >= 5 replicates scripts
// by their effects (Redis 7 only so), so a non-deterministic command
// before a write is allowed and replicas receive the resulting ZADD/HSET,
// never a re-run with another time. Times are integers of µs since the
// epoch (about 1.7e15), exact in a Lua double (< 2^53). Numbers that go
// into keys, members or ranges are formatted with %d, because Lua's
// tostring would print 1.7e+15.
//
// n > L and n <= 0 never reach the scripts (the Store denies them first).

// decisionArgs opens both decision scripts: their common arguments
// (ARGV[1] limit L, [2] window W in µs, [3] n, [4] mode 0 peek / 1 record
// when admitted / 2 record always (penalty), [5] explicit µs time for tests,
// empty in production) and the time, the server's TIME unless ARGV[5] is set.
const decisionArgs = `
local L = tonumber(ARGV[1])
local W = tonumber(ARGV[2])
local n = tonumber(ARGV[3])
local mode = tonumber(ARGV[4])
local now = tonumber(ARGV[5])
if not now then
  local tm = redis.call('TIME')
  now = tonumber(tm[1]) * 1000000 + tonumber(tm[2])
end
`

// logScript is SlidingLog on a sorted set, the engine's ring in Redis: the
// set keeps the last L recorded timestamps (score = µs, member =
// "<µs>:<seq>", seq from KEYS[2] so members stay unique at equal
// timestamps). A request of n at t is admitted iff at most L-n recorded
// entries lie in the closed interval [t-W, t]. As in the engine, time never
// goes back for a key (t = max(now, newest entry)), and delays count from
// the unclamped now.
var logScript = redis.NewScript(decisionArgs + `local top = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
local last = tonumber(top[2])
local t = now
if last and last > t then t = last end
local from = string.format('%d', t - W)
local c = redis.call('ZCOUNT', KEYS[1], from, '+inf')
local allowed = c + n <= L
local record = mode == 2 or (mode == 1 and allowed)
-- at(k): the k-th oldest (from 0) of the ring's last L entries, for k >=
-- L-c, i.e. an entry inside the window (the set holds at most L entries,
-- the newest c of them in the window).
local function at(k)
  local e = redis.call('ZRANGEBYSCORE', KEYS[1], from, '+inf', 'WITHSCORES', 'LIMIT', k - (L - c), 1)
  return tonumber(e[2])
end
local after = c
local newest = nil
if c > 0 then newest = last end
local retry = 0
if record and allowed then
  after = c + n
  newest = t
elseif record then
  -- Penalty: the n oldest entries are displaced, some of them inside the
  -- window; n more pass once the old entry 2n-1 (or these) leave it.
  local inside = 0
  if n > L - c then inside = n - (L - c) end
  after = c + n - inside
  newest = t
  local need = t
  if 2 * n - 1 < L then need = at(2 * n - 1) end
  retry = need + W + 1 - now
elseif not allowed then
  retry = at(n - 1) + W + 1 - now
end
if record then
  local seq = redis.call('INCRBY', KEYS[2], n) - n
  local ts = string.format('%d', t)
  local i = 1
  while i <= n do
    -- ZADD in chunks: unpack of a huge table overflows Lua's C stack.
    local args = {}
    local j = 0
    while i <= n and j < 1000 do
      args[2 * j + 1] = ts
      args[2 * j + 2] = ts .. ':' .. string.format('%d', seq + i)
      i = i + 1
      j = j + 1
    end
    redis.call('ZADD', KEYS[1], unpack(args))
  end
  -- Drop what left the window (t never decreases, so it never counts
  -- again), then keep the newest L (the ring's capacity): memory per key
  -- stays bounded even in penalty mode.
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', '(' .. from)
  redis.call('ZREMRANGEBYRANK', KEYS[1], 0, -L - 1)
  redis.call('PEXPIRE', KEYS[1], ARGV[6])
  redis.call('PEXPIRE', KEYS[2], ARGV[6])
end
local remaining = 0
if after < L then remaining = L - after end
local reset = 0
if newest then reset = newest + W + 1 - now end
return {allowed and 1 or 0, remaining, retry, reset}
`)

// counterScript is SlidingCounter on one hash {w: window number, p:
// previous window's count, c: current window's count}, the engine's packed
// word in Redis. Windows are aligned to multiples of W; at elapsed e into
// window w, n requests are admitted iff p*(W-e)/W + c + n <= L, compared
// as p*(W-e) <= (L-c-n)*W in integers. Lua numbers are doubles, so the
// comparison is exact while Limit x Window stays below 2^53 µs (any Limit
// with a window up to 2.4 h); beyond that it rounds in the 16th digit.
// Counts saturate at 2^20-1 like the engine's 20-bit fields; a stored
// window ahead of now (time never goes back for a key) is used as is, at
// its start. Remaining, RetryAfter and ResetAfter follow
// atomiccounter.Describe.
var counterScript = redis.NewScript(decisionArgs + `local MAX = 1048575
-- fdiv is floor(a/b) for integers a, b > 0, corrected for the rounding of
-- the double quotient.
local function fdiv(a, b)
  local q = math.floor(a / b)
  if q * b > a then q = q - 1 elseif (q + 1) * b <= a then q = q + 1 end
  return q
end
local w = math.floor(now / W)
local e = now - w * W
local prev, cur = 0, 0
local h = redis.call('HMGET', KEYS[1], 'w', 'p', 'c')
local sw = tonumber(h[1])
if sw then
  local sp = tonumber(h[2]) or 0
  local sc = tonumber(h[3]) or 0
  if sw == w then
    prev, cur = sp, sc
  elseif sw == w - 1 then
    prev = sc
  elseif sw > w then
    w, e, prev, cur = sw, 0, sp, sc
  end
end
local allowed = L - cur - n >= 0 and prev * (W - e) <= (L - cur - n) * W
local record = mode == 2 or (mode == 1 and allowed)
if record then
  cur = math.min(cur + n, MAX)
  redis.call('HSET', KEYS[1], 'w', string.format('%d', w), 'p', prev, 'c', cur)
  redis.call('PEXPIRE', KEYS[1], ARGV[6])
end
local rest = W - e
local p = prev * rest
local weighted = fdiv(p, W)
if weighted * W < p then weighted = weighted + 1 end
local remaining = 0
if weighted + cur < L then remaining = L - weighted - cur end
local reset = 0
if cur > 0 then reset = rest + W elseif prev > 0 then reset = rest end
local retry = 0
if not allowed then
  -- the earliest e' in [e, W) with prev*(W-e') <= (L-cur-n)*W ...
  retry = -1
  if cur + n <= L and prev == 0 then
    retry = 0
  elseif cur + n <= L then
    local slack = math.min(fdiv((L - cur - n) * W, prev), W)
    if W - slack < W then retry = math.max(W - slack, e) - e end
  end
  if retry < 0 then
    -- ... else in the next window, where prev' = cur and cur' = 0
    if cur == 0 or L - n >= cur then
      retry = W - e
    else
      local at = W - fdiv((L - n) * W, cur)
      if at < W then retry = W - e + at else retry = 2 * W - e end
    end
  end
end
return {allowed and 1 or 0, remaining, retry, reset}
`)

// The lease scripts serve Hybrid. One call per key per sync: first give
// back the unused tokens of leases the node no longer uses, then reserve
// up to g new tokens at the server's TIME, as g requests would be
// recorded, so the Redis window holds every token any node may spend.
//
//	ARGV[1] limit L   ARGV[2] window W in µs   ARGV[3] g (0: return only)
//	ARGV[4] key TTL in ms   ARGV[5] r, the number of returns, then r triples
//	log:     (µs timestamp of the lease, first seq to drop, count)
//	counter: (window number of the lease, count, unused)
//	reply:   {granted, log: timestamp µs | counter: window number, log: first seq}

// logLeaseScript removes returned members by name (a lease's members are
// "<µs>:<seq>" for consecutive seqs) and adds granted ones like logScript.
var logLeaseScript = redis.NewScript(`
local L = tonumber(ARGV[1])
local W = tonumber(ARGV[2])
local g = tonumber(ARGV[3])
local r = tonumber(ARGV[5])
for i = 0, r - 1 do
  local at = ARGV[6 + 3 * i]
  local first = tonumber(ARGV[7 + 3 * i])
  local cnt = tonumber(ARGV[8 + 3 * i])
  local j = 0
  while j < cnt do
    local m = {}
    local k = 0
    while j < cnt and k < 1000 do
      k = k + 1
      m[k] = at .. ':' .. string.format('%d', first + j)
      j = j + 1
    end
    redis.call('ZREM', KEYS[1], unpack(m))
  end
end
if g <= 0 then return {0, 0, 0} end
local tm = redis.call('TIME')
local now = tonumber(tm[1]) * 1000000 + tonumber(tm[2])
local top = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
local last = tonumber(top[2])
local t = now
if last and last > t then t = last end
local from = string.format('%d', t - W)
local c = redis.call('ZCOUNT', KEYS[1], from, '+inf')
local k = L - c
if k > g then k = g end
if k <= 0 then return {0, t, 0} end
local seq = redis.call('INCRBY', KEYS[2], k) - k
local ts = string.format('%d', t)
local i = 1
while i <= k do
  local args = {}
  local j = 0
  while i <= k and j < 1000 do
    args[2 * j + 1] = ts
    args[2 * j + 2] = ts .. ':' .. string.format('%d', seq + i)
    i = i + 1
    j = j + 1
  end
  redis.call('ZADD', KEYS[1], unpack(args))
end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', '(' .. from)
redis.call('ZREMRANGEBYRANK', KEYS[1], 0, -L - 1)
redis.call('PEXPIRE', KEYS[1], ARGV[4])
redis.call('PEXPIRE', KEYS[2], ARGV[4])
return {k, t, seq + 1}
`)

// counterLeaseScript subtracts returned tokens from the window they were
// added to (now the current or the previous window; older ones no longer
// count) and adds granted ones to the current window: the largest k with
// prev*(W-e) <= (L-cur-k)*W, capped at g.
var counterLeaseScript = redis.NewScript(`
local L = tonumber(ARGV[1])
local W = tonumber(ARGV[2])
local g = tonumber(ARGV[3])
local r = tonumber(ARGV[5])
local tm = redis.call('TIME')
local now = tonumber(tm[1]) * 1000000 + tonumber(tm[2])
local w = math.floor(now / W)
local e = now - w * W
local prev, cur = 0, 0
local h = redis.call('HMGET', KEYS[1], 'w', 'p', 'c')
local sw = tonumber(h[1])
if sw then
  local sp = tonumber(h[2]) or 0
  local sc = tonumber(h[3]) or 0
  if sw == w then
    prev, cur = sp, sc
  elseif sw == w - 1 then
    prev = sc
  elseif sw > w then
    w, e, prev, cur = sw, 0, sp, sc
  end
end
for i = 0, r - 1 do
  local lw = tonumber(ARGV[6 + 3 * i])
  local unused = tonumber(ARGV[8 + 3 * i])
  if lw == w then cur = math.max(0, cur - unused)
  elseif lw == w - 1 then prev = math.max(0, prev - unused) end
end
local k = 0
if g > 0 then
  local p = prev * (W - e)
  local q = math.floor(p / W)
  if q * W > p then q = q - 1 elseif (q + 1) * W <= p then q = q + 1 end
  if q * W < p then q = q + 1 end
  k = math.min(g, L - cur - q)
  if k < 0 then k = 0 end
end
cur = cur + k
if cur > 0 or prev > 0 then
  redis.call('HSET', KEYS[1], 'w', string.format('%d', w), 'p', prev, 'c', cur)
  redis.call('PEXPIRE', KEYS[1], ARGV[4])
end
return {k, w, 0}
`)
