package redisstore

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/slidelimit/slidelimit/engine"
)

// Store is a rate limiter (sliding window or GCRA) whose state lives in
// Redis, so all processes sharing the Redis (or cluster) share one limit per
// key. It satisfies engine.RateLimiter and is safe for concurrent use.
type Store struct {
	cfg    Config
	ks     keyspace
	script *script
	clock  *serverClock
	start  time.Time
	br     breaker

	// The script's constant arguments, boxed once so that a call does not
	// allocate for them (ARGV[1], [2], [6]; GCRA's: burst, T in ns, extra
	// TTL, and [8] penalty).
	limit, winUS, ttl, penalty any
	// unit is the scripts' unit of RetryAfter and ResetAfter: µs, or ns
	// for GCRA (exact to the ns, as the engine's).
	unit time.Duration

	evict     evictionWatch
	closeOnce sync.Once // Close's claim of evict.sampling (see Close)
	slots     doneSlots // the shared Done channels of calls (see callCtx)

	localOnce sync.Once
	local     atomic.Pointer[engine.Limiter] // FailLocal's engine, built at the first fault

	calls, allowed, denied, invalid   atomic.Uint64
	timeouts, errs, shortCircuits     atomic.Uint64
	canceled, late, keysTooLong       atomic.Uint64
	clockReads                        atomic.Uint64
	failOpen, failClosed, failedLocal atomic.Uint64
}

// Stats is a snapshot of a Store's counters; they are monotonic and may miss
// the latest operations under concurrent use.
type Stats struct {
	Calls         uint64 // decisions, peeks and resets asked of the Store
	Allowed       uint64 // decisions that admitted (by Redis or by the policy)
	Denied        uint64 // decisions that denied
	Invalid       uint64 // calls of n <= 0 or n > Limit (GCRA: Burst): denied with RetryAfter engine.Never, never sent, not in Denied
	Timeouts      uint64 // Redis calls that ran past Config.Timeout
	Late          uint64 // calls Redis refused because they reached it after their deadline (a stalled server; or a reply margin that ran out, see "Deadlines")
	Errors        uint64 // other failed Redis calls (refused, reset, server error replies)
	Canceled      uint64 // calls whose caller's context ended first (not Redis's fault; the breaker ignores them); one during which Redis also stalled past Timeout is a Timeout or Late, and still consumes nothing for the caller
	KeysTooLong   uint64 // calls with a key longer than MaxKeyLen (denied, never sent)
	BreakerOpens  uint64 // times the circuit breaker opened
	ShortCircuits uint64 // calls not sent because the breaker was open
	FailOpen      uint64 // decisions made by FailOpen
	FailClosed    uint64 // decisions made by FailClosed
	FailLocal     uint64 // decisions made by the FailLocal engine
	// EvictedKeys is how many keys the servers evicted (INFO stats
	// evicted_keys, summed over the servers) since New, sampled at most
	// once a second while calls are made. Redis does not say whose keys:
	// any eviction on a server holding limiter keys may have been one of
	// them (see "Eviction" in the package documentation).
	EvictedKeys uint64
	// EvictionUnchecked is true when New could not read a server's
	// maxmemory-policy (CONFIG denied or renamed, as on managed services;
	// or the server unreachable then); EvictionCheck says why.
	EvictionUnchecked bool
	// EvictedKeysUnknown is true when the latest sample of evicted_keys
	// could not read every server (INFO denied, a server unreachable or
	// down): EvictedKeys misses that server's evictions until a sample
	// reads it (its first read is its baseline).
	EvictedKeysUnknown bool
	ClockReads         uint64 // reads of a server's TIME before a call, because the estimate of its clock was missing or stale (see "Deadlines" in the package documentation)
	BreakerOpen        bool   // the breaker is open or half-open now
}

// Script modes (ARGV[4]), boxed once.
var (
	modePeek    any = "0"
	modeAllow   any = "1"
	modePenalty any = "2"
	oneKey      any = "1" // numkeys; a string, so that cluster routing does not format it
	noClock     any = ""
)

// New validates cfg and returns a Store. It asks each server for its
// maxmemory and maxmemory-policy (CONFIG GET) and refuses, with an error
// wrapping ErrEvictionPolicy, a server that can evict the limiter's keys,
// unless Config.AllowEviction; a server that cannot be asked is accepted
// and reported (Stats.EvictionUnchecked, EvictionCheck). The servers asked
// are a single server and the replicas it reports, every node of a cluster,
// every shard of a Ring. It also reads the servers' evicted_keys, the
// baseline of Stats.EvictedKeys (also when the policy could not be
// checked). Each of the two
// runs under the longer of Config.Timeout and a second (a first dial and a
// distant server need more than a decision's budget; New waits that long at
// most per step for a server that does not answer). Then it loads the
// scripts on every server (SCRIPT LOAD, best effort, under the same
// bound), so that a first call does not pay for them within its Timeout;
// a server that lacks them later (restarted, promoted, SCRIPT FLUSH) gets
// them by EVAL when it answers NOSCRIPT.
func New(cfg Config) (*Store, error) {
	c, err := cfg.normalize()
	if err != nil {
		return nil, err
	}
	s := &Store{cfg: c, ks: newKeyspace(c), start: time.Now(), script: logScript, unit: time.Microsecond}
	s.clock = newServerClock(c.Client)
	s.slots = newDoneSlots(c.Timeout)
	s.br.threshold = int64(c.BreakerThreshold)
	s.br.cooldown = int64(c.BreakerCooldown)
	s.br.interval = int64(c.Timeout)
	s.br.lastFail.Store(-1)
	ttl := c.Window
	if c.Algorithm == engine.SlidingCounter {
		s.script = counterScript
		ttl = 2 * c.Window // the current window's count matters until the next one ends
	}
	if c.Clock != nil {
		ttl += time.Hour
	}
	s.ttl = strconv.FormatInt(int64((ttl+time.Millisecond-1)/time.Millisecond)+1, 10)
	s.winUS = strconv.FormatInt(int64(c.Window/time.Microsecond), 10)
	s.limit = strconv.Itoa(c.Limit)
	if c.Algorithm == engine.GCRA {
		// The bucket B and the emission interval T in ns (see gcraScript);
		// the TTL is computed by the script, plus an hour with a Clock.
		s.script, s.unit = gcraScript, time.Nanosecond
		s.limit = strconv.Itoa(c.Burst)
		s.winUS = strconv.FormatInt(c.gcraToken(), 10)
		s.ttl = "0"
		if c.Clock != nil {
			s.ttl = strconv.FormatInt(int64(time.Hour/time.Millisecond), 10)
		}
		s.penalty = "0"
		if c.Penalty {
			s.penalty = "1"
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout(c.Timeout))
	err = s.evict.checkEviction(ctx, c.Client, c.AllowEviction)
	cancel()
	if err != nil {
		return nil, err
	}
	// The baseline, also when the policy could not be checked (INFO may
	// be allowed where CONFIG is not); a server that fails here sets its
	// own later, and Stats.EvictedKeysUnknown says so meanwhile.
	ctx, cancel = context.WithTimeout(context.Background(), setupTimeout(c.Timeout))
	s.sampleEvictions(ctx)
	cancel()
	s.evict.next.Store(s.mono() + int64(evictionSampleEvery))
	s.loadScripts(s.script, timeScript, resetScript)
	return s, nil
}

// loadScripts loads scripts on every server (SCRIPT LOAD), best effort,
// under the setup timeout. Without it the first call to each server pays
// for NOSCRIPT and EVAL within its own budget: over a link of 20 ms round
// trip with a 50 ms Timeout, a call that also reads the clock then never
// fits, and since its EVAL is never sent, no later call does either. A
// server that misses them (down now, a later failover or new master) gets
// them by EVAL on its first NOSCRIPT.
func (s *Store) loadScripts(scripts ...*script) {
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout(s.cfg.Timeout))
	defer cancel()
	_ = forEachServer(ctx, s.cfg.Client, func(ctx context.Context, srv *redis.Client) error {
		for _, sc := range scripts {
			if err := srv.ScriptLoad(ctx, sc.src).Err(); err != nil {
				return err
			}
		}
		return nil
	})
}

// EvictionCheck returns nil when New read every server's maxmemory-policy
// (and accepted it), or an error saying why it could not: then nothing
// guards against Redis evicting the limiter's keys but the operator (see
// "Eviction" in the package documentation).
func (s *Store) EvictionCheck() error {
	if why := s.evict.unchecked.Load(); why != nil {
		return errors.New("redisstore: " + *why)
	}
	return nil
}

// Config returns the configuration with defaults filled in.
func (s *Store) Config() Config { return s.cfg }

// mono is the Store's monotonic clock for the breaker.
func (s *Store) mono() int64 { return int64(time.Since(s.start)) }

// Allow reports whether one request for key is admitted now.
func (s *Store) Allow(key string) bool { return s.AllowN(key, 1).Allowed }

// AllowN admits n requests for key, all or none, as decided by Redis within
// Config.Timeout; when Redis does not answer, Config.OnFailure decides.
func (s *Store) AllowN(key string, n int) engine.Decision {
	d, _ := s.AllowNContext(context.Background(), key, n)
	return d
}

// Peek reports what AllowN(key, 1) would decide, consuming nothing.
func (s *Store) Peek(key string) engine.Decision {
	d, _ := s.PeekContext(context.Background(), key)
	return d
}

// Reset forgets key's state (in Redis and in the FailLocal engine).
func (s *Store) Reset(key string) { _ = s.ResetContext(context.Background(), key) }

// AllowNContext is AllowN under ctx (the shorter of ctx's deadline and
// Config.Timeout applies). When Redis fails it returns the fail policy's
// decision together with an error wrapping ErrUnavailable and the cause:
// ErrCircuitOpen, context.DeadlineExceeded (for any timeout: the socket's,
// or Redis refusing a late call) or the client's error. When ctx has ended
// before the call, or ends while the call is out and Redis's reply does not
// come back, it returns the policy's decision without consuming anything
// (FailLocal peeks) and an error wrapping ctx's error alone. A reply that
// does come back is Redis's decision, which Redis recorded: it is returned
// with a nil error even if ctx ended meanwhile (go-redis does not interrupt
// a read in progress when ctx is cancelled, only at its deadline). A key longer
// than MaxKeyLen is denied with an error wrapping ErrKeyTooLong. A request
// of n <= 0 or n > Limit is denied with RetryAfter engine.Never, as by the
// engine, without a round trip (GCRA: n > Burst).
func (s *Store) AllowNContext(ctx context.Context, key string, n int) (engine.Decision, error) {
	s.calls.Add(1)
	if c := s.cfg.capacity(); n <= 0 || n > c {
		// As the engine: no wait admits it (RetryAfter engine.Never),
		// nothing is recorded, and it is counted apart from denials.
		s.invalid.Add(1)
		return engine.Decision{Limit: c, RetryAfter: engine.Never}, nil
	}
	if err := s.checkKey("allow", key); err != nil {
		s.denied.Add(1)
		return engine.Decision{Limit: s.cfg.capacity()}, err
	}
	mode := modeAllow
	if s.cfg.Penalty {
		mode = modePenalty
	}
	d, err := s.decide(ctx, key, n, mode)
	if err != nil {
		d = s.fail(key, n, errors.Is(err, ErrUnavailable))
		err = fmt.Errorf("redisstore: allow %q: %w", key, err)
	}
	if d.Allowed {
		s.allowed.Add(1)
	} else {
		s.denied.Add(1)
	}
	return d, err
}

// PeekContext is Peek under ctx; errors as for AllowNContext.
func (s *Store) PeekContext(ctx context.Context, key string) (engine.Decision, error) {
	s.calls.Add(1)
	if err := s.checkKey("peek", key); err != nil {
		return engine.Decision{Limit: s.cfg.capacity()}, err
	}
	d, err := s.decide(ctx, key, 1, modePeek)
	if err != nil {
		d = s.fail(key, 1, false)
		err = fmt.Errorf("redisstore: peek %q: %w", key, err)
	}
	return d, err
}

// ResetContext is Reset under ctx. The FailLocal engine's state is reset
// even when Redis fails. Like a decision, a Reset that reaches Redis after
// its deadline is refused there, so it cannot wipe what was recorded after
// the caller gave up.
func (s *Store) ResetContext(ctx context.Context, key string) error {
	s.calls.Add(1)
	if err := s.checkKey("reset", key); err != nil {
		return err
	}
	if lim := s.local.Load(); lim != nil {
		lim.Reset(key)
	}
	name, t := s.ks.state(key)
	if _, err := s.eval(ctx, resetScript, name, t, []any{nil}, 0); err != nil {
		return fmt.Errorf("redisstore: reset %q: %w", key, err)
	}
	return nil
}

func (s *Store) checkKey(op, key string) error {
	if len(key) <= MaxKeyLen {
		return nil
	}
	s.keysTooLong.Add(1)
	return fmt.Errorf("redisstore: %s: key of %d bytes: %w", op, len(key), ErrKeyTooLong)
}

// decide evaluates the algorithm's script for key.
func (s *Store) decide(ctx context.Context, key string, n int, mode any) (engine.Decision, error) {
	now := noClock
	if s.cfg.Clock != nil {
		now = strconv.FormatInt(s.cfg.Clock.Now()/int64(time.Microsecond), 10)
	}
	name, t := s.ks.state(key)
	argv := []any{s.limit, s.winUS, n, mode, now, s.ttl, nil, s.penalty}
	if s.penalty == nil {
		argv = argv[:7]
	}
	r, err := s.eval(ctx, s.script, name, t, argv, 6)
	if err != nil {
		return engine.Decision{}, err
	}
	return engine.Decision{
		Allowed:    r[0] == 1,
		Limit:      s.cfg.capacity(),
		Remaining:  int(r[1]),
		RetryAfter: time.Duration(r[2]) * s.unit,
		ResetAfter: time.Duration(r[3]) * s.unit,
	}, nil
}

// errLate is the cause of a call that Redis refused because it ran after
// its deadline (script status -1).
var errLate = errors.New("reached redis after its deadline")

// eval runs sc on the key name (hash tag t) with argv, whose element dlAt
// receives the deadline in the server's clock, in one round trip (see
// roundTrip), two when the estimate of that server's clock is not fresh
// (see nodeClock). It returns the reply's first four integers.
func (s *Store) eval(ctx context.Context, sc *script, name string, t uint16, argv []any, dlAt int) ([4]int64, error) {
	var out [4]int64
	err := s.roundTrip(ctx, func(ctx context.Context, deadline time.Time) error {
		nc := s.clock.node(ctx, name, t)
		off, err := s.offset(ctx, nc, name)
		if err != nil {
			return err
		}
		a := make([]any, 4+len(argv))
		a[0], a[1], a[2], a[3] = "evalsha", sc.shaArg, oneKey, name
		copy(a[4:], argv)
		sent := time.Now()
		a[4+dlAt] = serverDeadline(sent, deadline) + off
		cmd, err := s.run(ctx, sc, a)
		if err != nil {
			return err
		}
		r, err := s.reply(nc, cmd.Val(), sent, time.Now(), false)
		copy(out[:], r[:])
		return err
	})
	return out, err
}

// serverDeadline is the deadline, in this process's wall µs, by which the
// server must run a call sent at sent that the client gives up on at
// deadline (the caller adds the server's clock offset): seven eighths of
// the time left. It is taken when the call is sent, after any clock read,
// so that the read's round trip comes out of the whole budget, not out of
// the server's share.
//
// The offset used is a lower bound, low by the one-way delay of the reply
// that made it (see nodeClock), which moves the server's deadline that much
// earlier still: the server runs the call only if it does so at least one
// way back (as that reply took) plus the eighth before the client gives
// up. So the eighth is the margin for a reply slower than that one; a call
// refused though its reply came back in time is not held against the
// server (see roundTrip). With a 50 ms Timeout and 10 ms each way, a call
// that first reads the clock (20 ms) reaches the server at 30 ms, 6 ms
// before the last moment it is run.
func serverDeadline(sent, deadline time.Time) int64 {
	left := deadline.Sub(sent)
	if left < 0 {
		left = 0
	}
	return sent.UnixMicro() + int64((left-left/8)/time.Microsecond)
}

// run sends the script command a (a[0], a[1] = "evalsha", sc.shaArg), and
// again by EVAL when the server does not have the script.
func (s *Store) run(ctx context.Context, sc *script, a []any) (*redis.IntSliceCmd, error) {
	cmd := redis.NewIntSliceCmd(ctx, a...)
	err := s.cfg.Client.Process(ctx, cmd)
	if isNoScript(err) {
		a[0], a[1] = "eval", sc.srcArg // EVAL also caches the script
		cmd = redis.NewIntSliceCmd(ctx, a...)
		err = s.cfg.Client.Process(ctx, cmd)
	}
	return cmd, err
}

// offset returns nc's estimate of the server's clock offset, reading the
// server's TIME first when the estimate is missing or stale: no call is
// sent with a deadline converted by an estimate older than a second, or
// made before the local wall clock stepped.
func (s *Store) offset(ctx context.Context, nc *nodeClock, name string) (int64, error) {
	if off, ok := nc.offset(instantOf(time.Now())); ok {
		return off, nil
	}
	return s.readClock(ctx, nc, name)
}

// readClock reads the server's TIME, seeds nc with it and returns the
// offset's lower bound. A cluster master's is read from its own node
// client (nc.direct), which cannot be redirected to another server; other
// servers' by a script on the key name, which goes where the call will.
func (s *Store) readClock(ctx context.Context, nc *nodeClock, name string) (int64, error) {
	s.clockReads.Add(1)
	sent := time.Now()
	var server int64
	if d := nc.direct.Load(); d != nil {
		tm, err := d.Time(ctx).Result()
		if err != nil {
			return 0, err
		}
		server = tm.UnixMicro()
	} else {
		cmd, err := s.run(ctx, timeScript, []any{"evalsha", timeScript.shaArg, oneKey, name})
		if err != nil {
			return 0, err
		}
		r := cmd.Val()
		if len(r) != 5 {
			return 0, fmt.Errorf("script returned %d values, want 5", len(r))
		}
		server = r[4]
	}
	recv := time.Now()
	nc.observe(server, instantOf(sent), instantOf(recv), true)
	return offsetLow(server, recv.UnixMicro()), nil
}

// reply checks a script's reply, feeds its server time to the clock
// estimate nc (the call was sent at sent and its reply read at recv; seed
// as for observe) and returns errLate for a refusal.
func (s *Store) reply(nc *nodeClock, r []int64, sent, recv time.Time, seed bool) ([4]int64, error) {
	var out [4]int64
	if len(r) != 5 {
		return out, fmt.Errorf("script returned %d values, want 5", len(r))
	}
	nc.observe(r[4], instantOf(sent), instantOf(recv), seed)
	if r[0] == -1 {
		return out, errLate
	}
	copy(out[:], r[:4])
	return out, nil
}

// roundTrip runs one round trip to Redis, send, under the breaker and a
// deadline (the earlier of now + Config.Timeout and ctx's), classifies its
// failure and counts it. send gets the context to use and the time the
// client gives up on the call (see serverDeadline for the server's). Only
// the server's faults reach the breaker; an end of the caller's context
// (cancelled, or its earlier deadline passed) returns ctx's error without
// ErrUnavailable.
func (s *Store) roundTrip(parent context.Context, send func(ctx context.Context, deadline time.Time) error) error {
	if err := parent.Err(); err != nil {
		s.canceled.Add(1)
		return err
	}
	ok, probe := true, false
	if s.br.isOpen() { // a closed breaker needs no clock read
		ok, probe = s.br.allow(s.mono())
	}
	if !ok {
		s.shortCircuits.Add(1)
		return fmt.Errorf("%w: %w", ErrUnavailable, ErrCircuitOpen)
	}
	start := time.Now()
	deadline, own := start.Add(s.cfg.Timeout), true
	if d, ok := parent.Deadline(); ok && d.Before(deadline) {
		deadline, own = d, false
	}
	// go-redis reads the context's deadline for the socket's read and
	// write deadlines, and selects on its Done while it waits for a pooled
	// connection. A caller's context that cannot end (AllowN's) gets a
	// callCtx: the same deadline without a timer of its own (see callCtx).
	var err error
	if own && parent.Done() == nil && s.slots.size > 0 {
		if done := s.slots.done(int64(deadline.Sub(s.start)), s.mono()); done != nil {
			err = send(&callCtx{Context: parent, deadline: deadline, done: done}, deadline)
		} else {
			err = s.sendWithDeadline(parent, deadline, send)
		}
	} else {
		err = s.sendWithDeadline(parent, deadline, send)
	}
	if err == nil {
		s.br.success()
		s.maybeSample(int64(start.Sub(s.start)))
		return nil
	}
	now := s.mono()
	late := errors.Is(err, errLate)
	expired := !time.Now().Before(deadline)
	// gaveUp: the caller's context ended while the call was out. Whatever
	// the server did, the caller gets its context's error and the policy
	// consumes nothing for it (a client that left spends no quota, not
	// even FailLocal's); the server's stall still counts below.
	gaveUp := parent.Err()
	switch {
	case own && late && !expired && gaveUp == nil:
		// Redis refused the call as late, yet its refusal came back
		// before the deadline: the server answered in time, the margin
		// for the way back (see serverDeadline) ran out. The call fails
		// (nothing was recorded), but the server is not at fault.
		s.late.Add(1)
		s.br.success()
		return fmt.Errorf("%w: %w", ErrUnavailable, timeoutErr(err))
	case own && late:
		// Redis ran the call after its deadline and its reply came too
		// late: the server (or the network to it) stalled.
		s.late.Add(1)
		s.br.failure(now, probe)
		if gaveUp != nil {
			return gaveUp
		}
		return fmt.Errorf("%w: %w", ErrUnavailable, timeoutErr(err))
	case own && expired && isTimeout(err):
		// Redis did not answer within Timeout, whether or not the caller
		// also gave up meanwhile (go-redis keeps reading until the
		// deadline, so this is the server's silence).
		s.timeouts.Add(1)
		s.br.failure(now, probe)
		if gaveUp != nil {
			return gaveUp
		}
		return fmt.Errorf("%w: %w", ErrUnavailable, timeoutErr(err))
	case gaveUp != nil && !late && !isTimeout(err) && !errors.Is(err, context.Canceled) && serverDown(err):
		// The caller gave up, but the call failed for the server's own
		// reason (refused, reset, LOADING): the breaker counts it; the
		// caller still gets its context's error and consumes nothing.
		s.errs.Add(1)
		s.br.failure(now, probe)
		return gaveUp
	case gaveUp != nil || (!own && (expired || late)):
		// The caller gave up, or its own deadline, shorter than Timeout,
		// passed (or made the call late): not the server's fault.
		s.canceled.Add(1)
		if probe {
			s.br.abandon()
		}
		if cerr := parent.Err(); cerr != nil {
			return cerr
		}
		return timeoutErr(err)
	case isTimeout(err):
		// A timeout before any deadline (dialing): the server's.
		s.timeouts.Add(1)
		s.br.failure(now, probe)
		return fmt.Errorf("%w: %w", ErrUnavailable, timeoutErr(err))
	}
	s.errs.Add(1)
	if serverDown(err) {
		s.br.failure(now, probe)
	} else {
		// The server answered (e.g. WRONGTYPE on a foreign key): it is
		// alive, so this key's error must not open the breaker for all.
		s.br.success()
	}
	return fmt.Errorf("%w: %w", ErrUnavailable, err)
}

// sendWithDeadline runs send under context.WithDeadline(parent, deadline).
func (s *Store) sendWithDeadline(parent context.Context, deadline time.Time, send func(ctx context.Context, deadline time.Time) error) error {
	ctx, cancel := context.WithDeadline(parent, deadline)
	defer cancel()
	return send(ctx, deadline)
}

// timeoutErr makes a timeout of any kind (a socket's i/o timeout, a late
// refusal) wrap context.DeadlineExceeded, so callers test one sentinel.
func timeoutErr(err error) error {
	if errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return fmt.Errorf("%w: %w", context.DeadlineExceeded, err)
}

func isTimeout(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func isNoScript(err error) bool {
	if err == nil {
		return false // before errors.As: its target would escape, an allocation per call
	}
	var re redis.Error
	return errors.As(err, &re) && strings.HasPrefix(re.Error(), "NOSCRIPT")
}

// serverDown reports whether err means Redis cannot serve: anything that is
// not an error reply, or an error reply that is about the server rather
// than the key (loading, busy, failing over, read-only, out of memory, not
// persisting, out of connections).
func serverDown(err error) bool {
	var re redis.Error
	if !errors.As(err, &re) {
		return true
	}
	for _, p := range []string{"LOADING", "BUSY", "MASTERDOWN", "CLUSTERDOWN", "TRYAGAIN", "READONLY",
		"OOM", "MISCONF", "NOREPLICAS", "ERR max number of clients"} {
		if strings.HasPrefix(re.Error(), p) {
			return true
		}
	}
	return false
}

// fail decides by the fail policy. consume is false for peeks and for
// calls whose caller gave up: FailLocal then peeks (for n > 1: whether
// n would pass), so a decision nobody acts on takes nothing.
func (s *Store) fail(key string, n int, consume bool) engine.Decision {
	L := s.cfg.capacity()
	switch s.cfg.OnFailure {
	case FailOpen:
		s.failOpen.Add(1)
		// As the engine decides an untracked key: as if its window were empty.
		return engine.Decision{Allowed: true, Limit: L, Remaining: L - n}
	case FailClosed:
		s.failClosed.Add(1)
		return engine.Decision{Limit: L, RetryAfter: s.cfg.BreakerCooldown}
	}
	lim := s.localLimiter()
	if lim == nil {
		s.failClosed.Add(1)
		return engine.Decision{Limit: L, RetryAfter: s.cfg.BreakerCooldown}
	}
	s.failedLocal.Add(1)
	if consume {
		return lim.AllowN(key, n)
	}
	d := lim.Peek(key)
	if n > 1 && d.Allowed && d.Remaining < n-1 {
		d.Allowed = false
	}
	if d.Allowed {
		d.Remaining -= n - 1
	}
	return d
}

// localLimiter builds the FailLocal engine on first use, so a healthy Store
// never pays for its memory.
func (s *Store) localLimiter() *engine.Limiter {
	s.localOnce.Do(func() {
		// The config was validated against the engine's rules in New, so
		// an error here is impossible; a nil engine degrades to FailClosed.
		lim, err := engine.New(engine.Config{
			Algorithm: s.cfg.Algorithm,
			Limit:     s.cfg.localShare(),
			Burst:     s.cfg.localBurst(),
			Window:    s.cfg.Window,
			Penalty:   s.cfg.Penalty,
			Clock:     s.cfg.Clock,
		})
		if err == nil {
			s.local.Store(lim)
		}
	})
	return s.local.Load()
}

// Stats returns a snapshot of the Store's counters.
func (s *Store) Stats() Stats {
	return Stats{
		Calls:              s.calls.Load(),
		Allowed:            s.allowed.Load(),
		Denied:             s.denied.Load(),
		Invalid:            s.invalid.Load(),
		Timeouts:           s.timeouts.Load(),
		Late:               s.late.Load(),
		Errors:             s.errs.Load(),
		Canceled:           s.canceled.Load(),
		KeysTooLong:        s.keysTooLong.Load(),
		BreakerOpens:       s.br.opens.Load(),
		ShortCircuits:      s.shortCircuits.Load(),
		FailOpen:           s.failOpen.Load(),
		FailClosed:         s.failClosed.Load(),
		FailLocal:          s.failedLocal.Load(),
		ClockReads:         s.clockReads.Load(),
		EvictedKeys:        s.evict.evicted.Load(),
		EvictionUnchecked:  s.evict.unchecked.Load() != nil,
		EvictedKeysUnknown: s.evict.blind.Load(),
		BreakerOpen:        s.br.isOpen(),
	}
}

// Close releases the FailLocal engine, if one was built, and stops the
// eviction sampling (Stats.EvictedKeys): it waits for a sample in flight
// (INFO stats, bounded by the longer of Timeout and a second), so that no
// command of the Store's own is out on Config.Client once Close returns,
// and none starts after it. Calls after Close still decide. It does not
// close Config.Client, which the caller owns and may close right after.
// Safe to call more than once.
func (s *Store) Close() error {
	s.localOnce.Do(func() {}) // no engine may be built after Close starts
	s.closeOnce.Do(func() {
		// Take the sampling flag for good: a sample starts only by taking
		// it (maybeSample), and one running now gives it back when its
		// INFO ends. The sample goroutine signals nothing else, and Close
		// is no hot path, so it polls. Without this, a sample outlived
		// Close, and a caller's client.Close could close the connection
		// under it.
		for !s.evict.sampling.CompareAndSwap(false, true) {
			time.Sleep(time.Millisecond)
		}
	})
	if lim := s.local.Load(); lim != nil {
		return lim.Close()
	}
	return nil
}

var _ engine.RateLimiter = (*Store)(nil)
