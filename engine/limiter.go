package engine

// TEMPORARY simple implementation (mutex + map) so that dependent packages can
// be built while the lock-free internals land. Public API and semantics are final.

import (
	"sync"
	"sync/atomic"
	"time"
)

type simpleState struct {
	ts        []int64 // SlidingLog ring, in admission order
	head      int
	win       int64 // SlidingCounter window number
	prev, cur int64
}

// Limiter is a per-key sliding-window rate limiter. It is safe for concurrent use.
type Limiter struct {
	cfg     Config
	start   time.Time
	mu      sync.Mutex
	keys    map[string]*simpleState
	allowed atomic.Uint64
	denied  atomic.Uint64
	closed  atomic.Bool
}

// New validates cfg and returns a Limiter.
func New(cfg Config) (*Limiter, error) {
	c, err := cfg.normalize()
	if err != nil {
		return nil, err
	}
	return &Limiter{cfg: c, start: time.Now(), keys: map[string]*simpleState{}}, nil
}

// Now reads the Limiter's clock (Config.Clock, or the engine's own monotonic clock).
func (l *Limiter) Now() int64 {
	if l.cfg.Clock != nil {
		return l.cfg.Clock.Now()
	}
	return int64(time.Since(l.start))
}

// Config returns the configuration with defaults filled in.
func (l *Limiter) Config() Config { return l.cfg }

// Allow reports whether one request for key is admitted now.
func (l *Limiter) Allow(key string) bool { return l.AllowNAt(key, 1, l.Now()).Allowed }

// AllowN admits n requests for key now, all or none. n <= 0 or n > Limit is denied.
func (l *Limiter) AllowN(key string, n int) Decision { return l.AllowNAt(key, n, l.Now()) }

// AllowAt is Allow at an explicit time read from the Limiter's clock.
func (l *Limiter) AllowAt(key string, now int64) Decision { return l.AllowNAt(key, 1, now) }

// Peek reports what AllowN(key, 1) would decide, consuming nothing.
func (l *Limiter) Peek(key string) Decision { return l.PeekAt(key, l.Now()) }

// PeekAt is Peek at an explicit time.
func (l *Limiter) PeekAt(key string, now int64) Decision { return l.decide(key, 1, now, false) }

// AllowNAt is AllowN at an explicit time.
func (l *Limiter) AllowNAt(key string, n int, now int64) Decision {
	return l.decide(key, n, now, true)
}

func (l *Limiter) decide(key string, n int, now int64, consume bool) Decision {
	L := l.cfg.Limit
	W := int64(l.cfg.Window)
	if n <= 0 || n > L {
		if consume {
			l.denied.Add(1)
		}
		return Decision{Limit: L}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.keys[key]
	if s == nil {
		s = &simpleState{}
		if l.cfg.Algorithm == SlidingLog {
			s.ts = make([]int64, L)
			for i := range s.ts {
				s.ts[i] = -1 << 62
			}
		}
		if consume {
			l.keys[key] = s
		}
	}
	var d Decision
	d.Limit = L
	if l.cfg.Algorithm == SlidingLog {
		// count in window
		cnt := 0
		for _, t := range s.ts {
			if t >= now-W {
				cnt++
			}
		}
		oldest := s.ts[(s.head+n-1)%L]
		ok := oldest < now-W
		d.Allowed = ok
		if ok || (consume && l.cfg.Penalty) {
			if consume {
				for i := 0; i < n; i++ {
					s.ts[s.head] = now
					s.head = (s.head + 1) % L
				}
			}
		}
		if ok {
			d.Remaining = L - cnt - n
		} else {
			d.Remaining = L - cnt
			d.RetryAfter = time.Duration(oldest + W + 1 - now)
		}
		newest := s.ts[(s.head+L-1)%L]
		if newest >= now-W {
			d.ResetAfter = time.Duration(newest + W + 1 - now)
		}
	} else {
		w := now / W
		e := now - w*W
		prev, cur := s.prev, s.cur
		switch {
		case w == s.win:
		case w == s.win+1:
			prev, cur = cur, 0
		default:
			prev, cur = 0, 0
		}
		est := float64(prev)*float64(W-e)/float64(W) + float64(cur)
		d.Allowed = est+float64(n) <= float64(L)
		if consume && (d.Allowed || l.cfg.Penalty) {
			s.win, s.prev, s.cur = w, prev, cur+int64(n)
			cur += int64(n)
			if !d.Allowed {
				cur -= int64(n)
			}
		}
		if d.Allowed {
			est += float64(n)
		}
		d.Remaining = max(0, int(float64(L)-est))
		if !d.Allowed {
			d.RetryAfter = time.Duration(W - e)
		}
		if cur > 0 {
			d.ResetAfter = time.Duration(2*W - e)
		} else if prev > 0 {
			d.ResetAfter = time.Duration(W - e)
		}
	}
	if consume {
		if d.Allowed {
			l.allowed.Add(1)
		} else {
			l.denied.Add(1)
		}
	}
	return d
}

// Reset forgets key's state.
func (l *Limiter) Reset(key string) {
	l.mu.Lock()
	delete(l.keys, key)
	l.mu.Unlock()
}

// Len returns the number of keys tracked now.
func (l *Limiter) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.keys)
}

// Stats returns a snapshot of the Limiter's counters.
func (l *Limiter) Stats() Stats {
	return Stats{Keys: l.Len(), Allowed: l.allowed.Load(), Denied: l.denied.Load()}
}

// Close stops background work. It is safe to call more than once.
func (l *Limiter) Close() error { l.closed.Store(true); return nil }
