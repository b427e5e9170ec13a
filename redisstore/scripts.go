package redisstore

import (
	"crypto/sha1"
	"encoding/hex"
	"strconv"
)

// script is a Lua script sent by EVALSHA, or by EVAL (which also caches it
// on the server) when the server answers NOSCRIPT.
type script struct {
	src, sha string
	// The source and the digest boxed once, for command arguments: boxing
	// a string field allocates at every call.
	srcArg, shaArg any
}

func newScript(src string) *script {
	h := sha1.Sum([]byte(src))
	sha := hex.EncodeToString(h[:])
	return &script{src: src, sha: sha, srcArg: src, shaArg: sha}
}

// Every script starts by reading the server's TIME and refusing the call
// when it is past the deadline the client passed in the server's clock
// (see serverClock): then it returns status -1 and writes nothing, so a
// call the client has given up on (it timed out, its reply would come too
// late, it sat in the socket of a stalled server) never consumes quota. A
// script that writes many entries checks the deadline again after each
// chunk and takes its own writes back when it has passed. Every reply ends
// with that TIME, which feeds the clock estimate.
//
// Redis >= 5 replicates scripts by their effects, so reading TIME before a
// write is allowed and replicas receive the resulting writes, never a re-run
// at another time. Times are integers of µs since the epoch (about 1.7e15),
// exact in a Lua double (< 2^53); numbers that go into members, values or
// ranges are formatted with %d, because Lua's tostring would print 1.7e+15.
// Arguments of redis.call on the decision paths are strings, never Lua
// numbers: Redis turns a number argument into text with %.17g (and the
// command parses it back), which measured about 1 µs of server time per
// argument on the benchmark machine, against 0.4 µs for string.format('%d')
// and nothing for a string the script already has (TIME's fields, ARGV).
func deadlineCheck(argv int) string {
	return `
local tm = redis.call('TIME')
local real = tm[1] * 1000000 + tm[2]
local dl = tonumber(ARGV[` + strconv.Itoa(argv) + `])
if real > dl then return {-1, 0, 0, 0, real} end
`
}

// The decision scripts take the same ARGV and return the same reply, so the
// Go side has one code path:
//
//	ARGV[1] limit L          ARGV[2] window W in µs    ARGV[3] n
//	ARGV[4] mode: 0 peek, 1 allow, 2 allow and record even when denied (penalty)
//	ARGV[5] now in µs (Config.Clock), or "" for the server's TIME
//	ARGV[6] key TTL in ms    ARGV[7] deadline in the server's µs
//	reply:  {1 allowed | 0 denied | -1 late, remaining, retryAfter µs, resetAfter µs, server µs}
//
// n > L and n <= 0 never reach the scripts (the Store denies them first).
const decisionArgs = `
local L = tonumber(ARGV[1])
local W = tonumber(ARGV[2])
local n = tonumber(ARGV[3])
local mode = tonumber(ARGV[4])
local now = tonumber(ARGV[5]) or real
local rebase = ARGV[5] == ''
`

// Log members. An entry's member is unique without a counter: the script
// run that wrote it is named by the server's TIME when it started, and two
// script runs on one server never start in the same microsecond (a run
// takes several). A decision of one request writes tm[1] .. tm[2], the
// seconds (ten digits) and microseconds as TIME gives them, with no
// formatting; n requests, or a Hybrid lease, write R .. ':' .. i for i =
// first..first+n-1, with R the run's TIME in µs (%d), so that a lease's
// members can be named again to return them. A name can still be taken
// (after a failover to a server whose clock is behind the old one's, or a
// clock that stepped back): ZADD NX then reports it and a fresh one is
// picked ('#' and a number after a lone entry's name; for many, first
// moves up by a million until none of the n names is taken). So names are
// never shared, and a removed one does not come back, which keeps the
// Hybrid's returns, ZREM by name, idempotent.
//
// logMany defines member and addMany, for writes of more than one entry
// (the decision script defines them only then: a local function is a
// closure made at every call). addMany adds n entries at t in chunks
// (unpack of a huge table overflows Lua's C stack), checking the deadline
// after each; past it, it removes what it added and returns false. It
// returns true and the first index otherwise. Before each chunk it checks
// that none of the chunk's names is taken (ZMSCORE, one call; ZSCORE each
// before Redis 6.2): a run named like an earlier one may find any part of
// that run's names still there (penalty trimming by rank removes some of
// a run's entries, a Hybrid's returns others), and ZADD NX would silently
// skip those, counting fewer than n and leaving names that a return would
// remove from the other run. On a taken name it takes back what it added
// and starts over a million indexes up.
const logMany = `
local function member(R, i)
  return R .. ':' .. string.format('%d', i)
end
local function taken(K, m)
  local r = redis.pcall('ZMSCORE', K, unpack(m))
  if type(r) == 'table' and not r.err then
    for k = 1, #m do
      if r[k] then return true end
    end
    return false
  end
  for k = 1, #m do -- before Redis 6.2
    if redis.call('ZSCORE', K, m[k]) then return true end
  end
  return false
end
local function takeBack(K, R, first, i)
  local k = 0
  while k < i do
    local m = {}
    local j = 0
    while k < i and j < 1000 do
      j = j + 1
      m[j] = member(R, first + k)
      k = k + 1
    end
    redis.call('ZREM', K, unpack(m))
  end
end
local function addMany(K, R, t, n, dl)
  local first = 1
  local i = 0
  while i < n do
    local args = {'NX'}
    local m = {}
    local j = 0
    while i + j < n and j < 1000 do
      m[j + 1] = member(R, first + i + j)
      args[2 * j + 2] = t
      args[2 * j + 3] = m[j + 1]
      j = j + 1
    end
    if taken(K, m) then
      takeBack(K, R, first, i)
      first = first + 1000000
      i = 0
    else
      redis.call('ZADD', K, unpack(args))
      i = i + j
      local tm = redis.call('TIME')
      if tm[1] * 1000000 + tm[2] > dl then
        takeBack(K, R, first, i)
        return false, first
      end
    end
  end
  return true, first
end
`

// logWindow reads SlidingLog's state at now: t = max(now, newest entry)
// (a key's time never goes back; delays count from the unclamped now), the
// window's lower bound from and c, the entries in the closed interval
// [t-W, t].
//
// Entries after now mean a clock that went back: with the server's TIME
// (rebase), an NTP step back or a failover to a server whose clock is
// behind. Kept where they are, they would hold the key for the size of the
// step, not a Window; so they are moved back by d = newest - now, the
// newest to now, the others keeping their distance to it (ZADD XX, names
// kept, which the Hybrid's returns by name need). The newest was written
// no later than now in real time, so every entry moved is at least as old
// as it now looks, and one that stayed (at or before now) older than it
// looks too: nothing counts for less than its Window, nothing extra is
// admitted, and the key frees at most one Window after its first call
// after the step. The key's TTL, which the step lengthened (Redis expires keys by
// its wall clock), is set back to two windows, so upkeep (logWrite) keeps
// dropping old entries. With a Config.Clock (tests, the engine's semantics) they stay,
// and the newest one's score (last) is read: ZRANGE WITHSCORES formats a
// double for its reply, which costs twice a ZCOUNT, so only then.
//
// The bounds and scores go to Redis as text (see deadlineCheck): nowS is
// now's, from TIME's two fields with the µs padded to six digits (no
// formatting; ARGV[5] itself with a Config.Clock), tS is t's and fromS the
// window's lower bound's. Scores are integers, so the entries after now
// are those from '(' .. nowS.
const logWindow = `
local K = KEYS[1]
local nowS = ARGV[5]
if rebase then nowS = tm[1] .. string.sub('00000', #tm[2]) .. tm[2] end
local last = nil
if redis.call('ZCOUNT', K, '(' .. nowS, '+inf') > 0 then
  if rebase then
    local ahead = redis.call('ZRANGEBYSCORE', K, '(' .. nowS, '+inf', 'WITHSCORES')
    local d = tonumber(ahead[#ahead]) - now
    local i = 1
    while i <= #ahead do
      local args = {'XX'}
      local j = 0
      while i <= #ahead and j < 1000 do
        args[2 * j + 2] = tonumber(ahead[i + 1]) - d
        args[2 * j + 3] = ahead[i]
        i = i + 2
        j = j + 1
      end
      redis.call('ZADD', K, unpack(args))
    end
    redis.call('PEXPIRE', K, math.floor((2 * W + 999) / 1000) + 1)
  else
    last = tonumber(redis.call('ZRANGE', K, -1, -1, 'WITHSCORES')[2])
  end
end
local t, tS = now, nowS
if last and last > t then t, tS = last, string.format('%d', last) end
local from = t - W
local fromS = string.format('%d', from)
local c = redis.call('ZCOUNT', K, fromS, '+inf')
`

// logWrite adds n entries at t (see the members above: single says a
// lone entry may take the short name), setting first to the index of the
// first of many, and sets ok = false when the deadline passed during a
// write of many entries (taken back).
//
// Upkeep is amortized: when the key's TTL no longer covers the new entry's
// stay in the window, entries that have left the window are dropped (a
// range query never counts them) and the TTL is set to about two windows;
// so that happens about once a Window per key, a key holds the entries of
// about two windows (at most about 2 x L), and the usual write is a ZADD
// and a PTTL. With a Config.Clock (tests), timestamps are not the server's
// time: the TTL is relTTL (ms) at every write.
const logWrite = `
local ok, first = true, 1
if n == 1 and single then
  local name = tm[1] .. tm[2]
  local k = 0
  while redis.call('ZADD', K, 'NX', tS, name) == 0 do
    k = k + 1
    name = tm[1] .. tm[2] .. '#' .. string.format('%d', k)
  end
else
` + logMany + `
  ok, first = addMany(K, string.format('%d', real), tS, n, dl)
end
if ok then
  if relTTL then
    redis.call('PEXPIRE', K, relTTL)
  else
    local need = math.floor((t - now + W) / 1000) + 1
    if redis.call('PTTL', K) < need then
      redis.call('ZREMRANGEBYSCORE', K, '-inf', '(' .. fromS)
      redis.call('PEXPIRE', K, need + math.floor(W / 1000) + 1)
    end
  end
end
`

// logScript is SlidingLog on a sorted set, the engine's ring in Redis
// (score = µs). A request of n at t is admitted iff at most L-n recorded
// entries lie in [t-W, t]; an admitted write keeps that at most L. In
// penalty mode, where denied requests are recorded too, the oldest entries
// are displaced to keep the newest L, as in the ring.
var logScript = newScript(deadlineCheck(7) + decisionArgs + logWindow + `
local single = true
local relTTL = nil
if ARGV[5] ~= '' then relTTL = ARGV[6] end
local allowed = c + n <= L
local record = mode == 2 or (mode == 1 and allowed)
local after = c
local newest = nil
local retry = 0
if record and allowed then
  after = c + n
  newest = t
elseif c > 0 then
  if not last then last = tonumber(redis.call('ZRANGE', K, -1, -1, 'WITHSCORES')[2]) end
  newest = last
end
if not allowed then
  -- at(k): the k-th oldest (from 0) of the ring's last L entries, for k >=
  -- L-c, i.e. an entry inside the window (the newest c of the ring's
  -- entries are in the window).
  local function at(k)
    local e = redis.call('ZRANGEBYSCORE', K, fromS, '+inf', 'WITHSCORES', 'LIMIT', k - (L - c), 1)
    return tonumber(e[2])
  end
  if record then
    -- Penalty: the n oldest entries are displaced, some of them inside
    -- the window; n more pass once the old entry 2n-1 (or these) leave it.
    local inside = 0
    if n > L - c then inside = n - (L - c) end
    after = c + n - inside
    newest = t
    local need = t
    if 2 * n - 1 < L then need = at(2 * n - 1) end
    retry = need + W + 1 - now
  else
    retry = at(n - 1) + W + 1 - now
  end
end
if record then
` + logWrite + `
  if not ok then return {-1, 0, 0, 0, real} end
  -- penalty: keep the newest L (memory per key stays bounded)
  if c + n > L then redis.call('ZREMRANGEBYRANK', K, 0, -L - 1) end
end
local remaining = 0
if after < L then remaining = L - after end
local reset = 0
if newest then reset = newest + W + 1 - now end
return {allowed and 1 or 0, remaining, retry, reset, real}
`)

// counterState reads SlidingCounter's state, the engine's packed word in
// Redis: a 16-byte string, struct.pack('>dI4I4', w, p, c), the window
// number (a float64, exact below 2^53) and the previous and the current
// window's counts (uint32, at most 2^20-1). Binary rather than text:
// unpacking makes no strings, which keeps the script's garbage, and so its
// share of Lua's collector, to the reply. It shifts the state to the window
// w of now: prev and cur are the counts of windows w-1 and w.
//
// A stored window ahead of now means a clock that went back. With the
// server's TIME (rebase: an NTP step back, a failover to a server whose
// clock is behind) both its counts are folded into now's window, at full
// weight, and stored so, with the TTL of two windows: left ahead, they
// would hold the key for the size of the step (and every denial would
// restart the wait), where moved they age out as any window's do, within
// two windows of the step. Both, not the previous window as the previous
// one: now lies early in the stored window's past, where that count's
// weight (W-e)/W would drop to about nothing and forgive requests made
// moments ago. Folded, the estimate p*(W-e)/W + c never drops below what
// it was before the step (p + c >= that), and every request was counted no
// later than now in real time, so nothing extra is admitted.
// With a Config.Clock (tests, the engine's semantics: time never goes back
// for a key) the stored window is used as is, at its start.
const counterState = `
local K = KEYS[1]
local w = math.floor(now / W)
local e = now - w * W
local prev, cur = 0, 0
local v = redis.call('GET', K)
if v and #v == 16 then
  local sw, sp, sc = struct.unpack('>dI4I4', v)
  if sw == w then
    prev, cur = sp, sc
  elseif sw == w - 1 then
    prev = sc
  elseif sw > w and rebase then
    cur = math.min(sp + sc, 1048575)
    redis.call('SET', K, struct.pack('>dI4I4', w, prev, cur), 'PX', math.floor((2 * W + 999) / 1000) + 1)
  elseif sw > w then
    w, e, prev, cur = sw, 0, sp, sc
  end
end
`

// counterPack is the state's encoding (see counterState).
const counterPack = `struct.pack('>dI4I4', w, prev, cur)`

// fdiv is floor(a/b) for integers a, b > 0, corrected for the rounding of
// the double quotient. A local function is a closure made at every call,
// so the decision script defines it only where it denies.
const fdiv = `
local function fdiv(a, b)
  local q = math.floor(a / b)
  if q * b > a then q = q - 1 elseif (q + 1) * b <= a then q = q + 1 end
  return q
end
`

// counterScript is SlidingCounter. Windows are aligned to multiples of W;
// at elapsed e into window w, n requests are admitted iff p*(W-e)/W + c + n
// <= L, compared as p*(W-e) <= (L-c-n)*W in integers. Lua numbers are
// doubles, so the comparison is exact while Limit x Window stays below 2^53
// µs (any Limit with a window up to 2.4 h); beyond that it rounds in the
// 16th digit. Counts saturate at 2^20-1 like the engine's 20-bit fields.
// Remaining, RetryAfter and ResetAfter follow atomiccounter.Describe.
var counterScript = newScript(deadlineCheck(7) + decisionArgs + counterState + `
local MAX = 1048575
local allowed = L - cur - n >= 0 and prev * (W - e) <= (L - cur - n) * W
local record = mode == 2 or (mode == 1 and allowed)
if record then
  cur = math.min(cur + n, MAX)
  redis.call('SET', K, ` + counterPack + `, 'PX', ARGV[6])
end
local rest = W - e
local p = prev * rest
-- weighted = ceil(p / W), the double quotient corrected as in fdiv
local weighted = math.floor(p / W)
if weighted * W > p then weighted = weighted - 1 elseif (weighted + 1) * W <= p then weighted = weighted + 1 end
if weighted * W < p then weighted = weighted + 1 end
local remaining = 0
if weighted + cur < L then remaining = L - weighted - cur end
local reset = 0
if cur > 0 then reset = rest + W elseif prev > 0 then reset = rest end
local retry = 0
if not allowed then
` + fdiv + `
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
return {allowed and 1 or 0, remaining, retry, reset, real}
`)

// resetScript deletes KEYS[1] unless the call is late (ARGV[1] is the
// deadline): a Reset the client gave up on must not wipe what other calls
// recorded after it. Reply: {1 | -1 late, 0, 0, 0, server µs}.
var resetScript = newScript(deadlineCheck(1) + `
redis.call('DEL', KEYS[1])
return {1, 0, 0, 0, real}
`)

// timeScript reads the server's TIME, to learn its clock before a call
// whose estimate is missing or stale (see nodeClock). It is a script on the
// call's key, not a TIME command, so that a cluster or a Ring sends it to
// the server the call will go to. Reply: {1, 0, 0, 0, server µs}.
var timeScript = newScript(`
local tm = redis.call('TIME')
return {1, 0, 0, 0, tm[1] * 1000000 + tm[2]}
`)

// The lease scripts serve Hybrid. One call per key per sync: first give
// back the unused tokens of leases the node no longer uses, then reserve
// up to g new tokens at the server's TIME, as g requests would be
// recorded, so the Redis window holds every token any node may spend.
//
//	ARGV[1] limit L   ARGV[2] window W in µs   ARGV[3] g (0: return only)
//	ARGV[4] key TTL in ms   ARGV[5] deadline in the server's µs
//	ARGV[6] r, the number of returns, then r triples:
//	  log:     (µs timestamp of the lease, first seq to drop, count)
//	  counter: (window number of the lease, count, return seq); the
//	           counter script also takes ARGV[7+3r], the node's id
//	reply:   {granted | -1 late, log: timestamp µs | counter: window number,
//	          log: first seq, 0, server µs}
//
// Returns must count once even when the node sends them again because it
// never saw the reply of a call that ran: the log removes members by name
// (not reused, see logWrite), which is idempotent; the counter keeps, per
// node, the highest return seq applied in a hash next to the state (same
// hash tag) and skips returns at or below it.

// logLeaseScript removes returned members by name and adds granted ones
// like logScript.
var logLeaseScript = newScript(deadlineCheck(5) + logMany + `
local L = tonumber(ARGV[1])
local W = tonumber(ARGV[2])
local g = tonumber(ARGV[3])
local r = tonumber(ARGV[6])
local now = real
local rebase = true
local relTTL = nil -- no Config.Clock in a Hybrid
for i = 0, r - 1 do
  local R = ARGV[7 + 3 * i]
  local first = tonumber(ARGV[8 + 3 * i])
  local cnt = tonumber(ARGV[9 + 3 * i])
  local j = 0
  while j < cnt do
    local m = {}
    local k = 0
    while j < cnt and k < 1000 do
      k = k + 1
      m[k] = member(R, first + j)
      j = j + 1
    end
    redis.call('ZREM', KEYS[1], unpack(m))
  end
end
if g <= 0 then return {0, 0, 0, 0, real} end
` + logWindow + `
local n = L - c
if n > g then n = g end
if n <= 0 then return {0, 0, 0, 0, real} end
local single = false -- a lease's members must be R:i, to be named in returns
` + logWrite + `
if not ok then return {-1, 0, 0, 0, real} end
return {n, real, first, 0, real}
`)

// counterLeaseScript subtracts returned tokens from the window they were
// added to (now the current or the previous window; older ones no longer
// count) and adds granted ones to the current window: the largest k with
// prev*(W-e) <= (L-cur-k)*W, capped at g. KEYS[2] is the hash of return
// seqs (field: node id). A state brought to zero by returns is deleted.
var counterLeaseScript = newScript(deadlineCheck(5) + `
local L = tonumber(ARGV[1])
local W = tonumber(ARGV[2])
local g = tonumber(ARGV[3])
local r = tonumber(ARGV[6])
local now = real
local rebase = true
` + counterState + fdiv + `
local changed = false
if r > 0 then
  local node = ARGV[7 + 3 * r]
  local done = tonumber(redis.call('HGET', KEYS[2], node)) or 0
  local top = done
  for i = 0, r - 1 do
    local lw = tonumber(ARGV[7 + 3 * i])
    local unused = tonumber(ARGV[8 + 3 * i])
    local sq = tonumber(ARGV[9 + 3 * i])
    if sq > done then
      if lw == w then
        cur = math.max(0, cur - unused)
        changed = true
      elseif lw == w - 1 then
        prev = math.max(0, prev - unused)
        changed = true
      end
      if sq > top then top = sq end
    end
  end
  if top > done then
    redis.call('HSET', KEYS[2], node, string.format('%d', top))
    redis.call('PEXPIRE', KEYS[2], ARGV[4])
  end
end
local k = 0
if g > 0 then
  local p = prev * (W - e)
  local q = fdiv(p, W)
  if q * W < p then q = q + 1 end
  k = math.min(g, L - cur - q)
  if k < 0 then k = 0 end
end
if k > 0 or changed then
  cur = cur + k
  if cur > 0 or prev > 0 then
    redis.call('SET', K, ` + counterPack + `, 'PX', ARGV[4])
  else
    redis.call('DEL', K)
  end
end
return {k, w, 0, 0, real}
`)

// gcraScript is GCRA (engine.GCRA, package gcra): the key's theoretical
// arrival time (TAT), the moment its bucket is full again. With emission
// interval T ns and a bucket of D = B x T ns, n requests at now are
// admitted iff max(TAT, now) + n x T - now <= D, and then TAT becomes
// max(TAT, now) + n x T. The state is a 12-byte string, struct.pack('>dI4',
// µs, ns): the TAT in whole µs (a float64, exact below 2^53) and the ns
// beyond them, so the TAT is exact to the ns, as the engine's. Everything
// is computed as d = TAT - now in ns, which stays below 2^53 (New bounds D
// at 2^51 ns), so every sum is exact in Lua's doubles.
//
//	ARGV[1] burst B    ARGV[2] T in ns   ARGV[3] n   ARGV[4] mode (as above)
//	ARGV[5] now in µs (Config.Clock), or "" for the server's TIME
//	ARGV[6] extra TTL in ms (an hour with a Config.Clock, else 0)
//	ARGV[7] deadline in the server's µs   ARGV[8] penalty ("1" or "0")
//	reply:  {1 | 0 | -1 late, remaining, retryAfter ns, resetAfter ns, server µs}
//
// A TAT further ahead of now than a key can legitimately be (D; 2 x D in
// penalty mode, where a denial pushes the TAT up to two buckets ahead)
// means a server clock that went back: with the server's TIME (rebase) it
// is capped there and stored so, an empty bucket at now (or a full
// penalty), rather than locking the key for the size of the step. The
// requests that made the TAT were made no later than now in real time, so
// the bucket is at least as empty as it looks: nothing extra is admitted. With
// a Config.Clock the TAT is used as is (the engine's semantics).
//
// The key's TTL is the time until its bucket is full again (rounded up to
// a ms, plus one): a key that has expired is a full bucket, as a missing
// one. A Penalty denial that would not push the TAT further writes nothing,
// as in the engine.
var gcraScript = newScript(deadlineCheck(7) + `
local B = tonumber(ARGV[1])
local T = tonumber(ARGV[2])
local n = tonumber(ARGV[3])
local mode = tonumber(ARGV[4])
local now = tonumber(ARGV[5]) or real
local rebase = ARGV[5] == ''
local extra = tonumber(ARGV[6])
local D = B * T
local top = D
if ARGV[8] == '1' then top = 2 * D end
local K = KEYS[1]
local d = nil
local v = redis.call('GET', K)
if v and #v == 12 then
  local tu, tr = struct.unpack('>dI4', v)
  d = (tu - now) * 1000 + tr
end
local write = false
if d and rebase and d > top then
  d = top
  write = true
end
local bd = 0
if d and d > 0 then bd = d end
local nd = bd + n * T
local allowed = nd <= D
local after = bd
if mode >= 1 and allowed then
  after = nd
  write = true
elseif mode == 2 then
  if nd > 2 * D then nd = 2 * D end
  if not d or nd > d then
    after = nd
    write = true
  end
end
if write then
  local q = math.floor(after / 1000)
  if q * 1000 > after then q = q - 1 elseif (q + 1) * 1000 <= after then q = q + 1 end
  redis.call('SET', K, struct.pack('>dI4', now + q, after - q * 1000), 'PX', string.format('%d', math.floor((after + 999999) / 1000000) + 1 + extra))
end
local remaining = 0
if after < D then
  local r = D - after
  remaining = math.floor(r / T)
  if remaining * T > r then remaining = remaining - 1 elseif (remaining + 1) * T <= r then remaining = remaining + 1 end
end
local retry = 0
if not allowed then retry = after + n * T - D end
return {allowed and 1 or 0, remaining, retry, after, real}
`)
