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

// Store is a sliding-window rate limiter whose state lives in Redis, so all
// processes sharing the Redis (or cluster) share one limit per key. It
// satisfies engine.RateLimiter and is safe for concurrent use.
type Store struct {
	cfg    Config
	script *redis.Script
	ttl    string // ARGV[6]
	winUS  string // ARGV[2]
	limit  string // ARGV[1]
	start  time.Time
	br     breaker

	localOnce sync.Once
	local     atomic.Pointer[engine.Limiter] // FailLocal's engine, built at the first fault

	calls, allowed, denied            atomic.Uint64
	timeouts, errs, shortCircuits     atomic.Uint64
	failOpen, failClosed, failedLocal atomic.Uint64
}

// Stats is a snapshot of a Store's counters; they are monotonic and may miss
// the latest operations under concurrent use.
type Stats struct {
	Calls         uint64 // decisions, peeks and resets asked of the Store
	Allowed       uint64 // decisions that admitted (by Redis or by the policy)
	Denied        uint64 // decisions that denied
	Timeouts      uint64 // Redis calls that ran past Config.Timeout or the caller's deadline
	Errors        uint64 // other failed Redis calls (refused, reset, server error replies)
	BreakerOpens  uint64 // times the circuit breaker opened
	ShortCircuits uint64 // calls not sent because the breaker was open
	FailOpen      uint64 // decisions made by FailOpen
	FailClosed    uint64 // decisions made by FailClosed
	FailLocal     uint64 // decisions made by the FailLocal engine
	BreakerOpen   bool   // the breaker is open or half-open now
}

// New validates cfg and returns a Store. It does not contact Redis: the
// first call loads the script (EVALSHA, falling back to EVAL on NOSCRIPT).
func New(cfg Config) (*Store, error) {
	c, err := cfg.normalize()
	if err != nil {
		return nil, err
	}
	s := &Store{cfg: c, start: time.Now()}
	s.br.threshold = int64(c.BreakerThreshold)
	s.br.cooldown = int64(c.BreakerCooldown)
	s.script = logScript
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
	return s, nil
}

// Config returns the configuration with defaults filled in.
func (s *Store) Config() Config { return s.cfg }

// keys returns the Redis keys of key. The hash tag {key} puts them in one
// cluster slot, so a script touching both is legal on a cluster.
func (s *Store) keys(key string) []string {
	base := s.cfg.Prefix + "{" + key + "}"
	if s.cfg.Algorithm == engine.SlidingCounter {
		return []string{base + ":c"}
	}
	return []string{base + ":l", base + ":s"}
}

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
// Config.Timeout applies). On a Redis failure it returns the fail policy's
// decision together with an error wrapping ErrUnavailable and the cause:
// ErrCircuitOpen, context.DeadlineExceeded (for any timeout, the context's
// or the socket's) or the client's error.
func (s *Store) AllowNContext(ctx context.Context, key string, n int) (engine.Decision, error) {
	s.calls.Add(1)
	if n <= 0 || n > s.cfg.Limit {
		s.denied.Add(1)
		return engine.Decision{Limit: s.cfg.Limit}, nil
	}
	mode := "1"
	if s.cfg.Penalty {
		mode = "2"
	}
	d, err := s.run(ctx, key, n, mode)
	if err != nil {
		d = s.fail(key, n, true)
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
	d, err := s.run(ctx, key, 1, "0")
	if err != nil {
		d = s.fail(key, 1, false)
		err = fmt.Errorf("redisstore: peek %q: %w", key, err)
	}
	return d, err
}

// ResetContext is Reset under ctx. The FailLocal engine's state is reset
// even when Redis fails.
func (s *Store) ResetContext(ctx context.Context, key string) error {
	s.calls.Add(1)
	if lim := s.local.Load(); lim != nil {
		lim.Reset(key)
	}
	err := s.do(ctx, func(ctx context.Context) error {
		return s.cfg.Client.Del(ctx, s.keys(key)...).Err()
	})
	if err != nil {
		return fmt.Errorf("redisstore: reset %q: %w", key, err)
	}
	return nil
}

// run evaluates the algorithm's script for key.
func (s *Store) run(ctx context.Context, key string, n int, mode string) (engine.Decision, error) {
	now := ""
	if s.cfg.Clock != nil {
		now = strconv.FormatInt(s.cfg.Clock.Now()/int64(time.Microsecond), 10)
	}
	var r []int64
	err := s.do(ctx, func(ctx context.Context) error {
		var err error
		r, err = s.script.Run(ctx, s.cfg.Client, s.keys(key), s.limit, s.winUS, n, mode, now, s.ttl).Int64Slice()
		if err == nil && len(r) != 4 {
			err = fmt.Errorf("script returned %d values, want 4", len(r))
		}
		return err
	})
	if err != nil {
		return engine.Decision{}, err
	}
	return engine.Decision{
		Allowed:    r[0] == 1,
		Limit:      s.cfg.Limit,
		Remaining:  int(r[1]),
		RetryAfter: time.Duration(r[2]) * time.Microsecond,
		ResetAfter: time.Duration(r[3]) * time.Microsecond,
	}, nil
}

// do runs one Redis call under the breaker and the per-call timeout and
// counts its fault, if any.
func (s *Store) do(ctx context.Context, call func(context.Context) error) error {
	ok, probe := s.br.allow(s.mono())
	if !ok {
		s.shortCircuits.Add(1)
		return fmt.Errorf("%w: %w", ErrUnavailable, ErrCircuitOpen)
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	err := call(ctx)
	cancel()
	if err == nil {
		s.br.success()
		return nil
	}
	timeout := isTimeout(err)
	if timeout {
		s.timeouts.Add(1)
	} else {
		s.errs.Add(1)
	}
	if timeout || serverDown(err) {
		s.br.failure(s.mono(), probe)
	} else {
		// The server answered (e.g. WRONGTYPE on a foreign key): it is
		// alive, so this key's error must not open the breaker for all.
		s.br.success()
	}
	if timeout && !errors.Is(err, context.DeadlineExceeded) {
		// A socket deadline (i/o timeout) is the same fault as the
		// context's: let callers test one sentinel for both.
		return fmt.Errorf("%w: %w: %w", ErrUnavailable, context.DeadlineExceeded, err)
	}
	return fmt.Errorf("%w: %w", ErrUnavailable, err)
}

func isTimeout(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// serverDown reports whether err means Redis cannot serve: anything that is
// not an error reply, or an error reply saying the node is unavailable.
func serverDown(err error) bool {
	var re redis.Error
	if !errors.As(err, &re) {
		return true
	}
	for _, p := range []string{"LOADING", "BUSY", "MASTERDOWN", "CLUSTERDOWN", "TRYAGAIN", "READONLY"} {
		if strings.HasPrefix(re.Error(), p) {
			return true
		}
	}
	return false
}

// fail decides by the fail policy.
func (s *Store) fail(key string, n int, consume bool) engine.Decision {
	L := s.cfg.Limit
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
	return lim.Peek(key)
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
		Calls:         s.calls.Load(),
		Allowed:       s.allowed.Load(),
		Denied:        s.denied.Load(),
		Timeouts:      s.timeouts.Load(),
		Errors:        s.errs.Load(),
		BreakerOpens:  s.br.opens.Load(),
		ShortCircuits: s.shortCircuits.Load(),
		FailOpen:      s.failOpen.Load(),
		FailClosed:    s.failClosed.Load(),
		FailLocal:     s.failedLocal.Load(),
		BreakerOpen:   s.br.isOpen(),
	}
}

// Close releases the FailLocal engine, if one was built. It does not close
// Config.Client, which the caller owns.
func (s *Store) Close() error {
	s.localOnce.Do(func() {}) // no engine may be built after Close starts
	if lim := s.local.Load(); lim != nil {
		return lim.Close()
	}
	return nil
}

var _ engine.RateLimiter = (*Store)(nil)
