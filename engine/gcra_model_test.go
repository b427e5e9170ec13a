package engine

import (
	"fmt"
	"math/big"
	"math/rand/v2"
	"testing"
	"time"
)

// gcraModel is the reference GCRA: the definition, sequentially, with the
// virtual clock of package engine's gcra.go written out (u advances at
// limit/MaxLimit of real time from the last SetLimit on) and the inverse
// of u found by search rather than by formula.
type gcraModel struct {
	window, max  int64
	limit, burst int
	follows      bool
	penalty      bool
	t0, t1, u0   int64
	num, den     int64 // the speed of u
	keys         map[string]*gcraKey
	token        int64
	deepest      int64 // the deepest bucket any rule has had (the Reset bound)
}

type gcraKey struct {
	at    int64
	reset bool
	alt   bool // on the real clock (last used with a per-call limit)
	hist  bool // was Reset
}

func newGCRAModel(limit, burst, maxLimit int, window time.Duration, penalty bool) *gcraModel {
	m := &gcraModel{window: int64(window), max: int64(maxLimit), limit: limit, burst: burst, follows: burst == 0, penalty: penalty, keys: map[string]*gcraKey{}}
	if m.follows {
		m.burst = limit
	}
	m.token = (m.window + m.max - 1) / m.max
	m.num, m.den = m.speed()
	m.deepest = int64(m.burst) * m.token
	return m
}

// bound is how long after its time a Reset key's word is idle: the
// callers' lead (one Window) plus the deepest bucket (two in Penalty
// mode) plus 2 ns.
func (m *gcraModel) bound() int64 {
	d := m.deepest
	if m.penalty {
		d *= 2
	}
	return m.window + d + 2
}

// speed is the speed of u per real ns: 1 at MaxLimit, else limit/MaxLimit
// slowed by 1/S, S = min(Token, 2^20) (it pays for reading u rounded down).
func (m *gcraModel) speed() (num, den int64) {
	if int64(m.limit) == m.max {
		return 1, 1
	}
	s := min(m.token, 1<<20)
	return int64(m.limit) * (s - 1), m.max * s
}

// mulDiv is a x b / c in exact arithmetic, rounded down or up.
func mulDiv(a, b, c int64, up bool) int64 {
	x := new(big.Int).Mul(big.NewInt(a), big.NewInt(b))
	q, r := new(big.Int).QuoRem(x, big.NewInt(c), new(big.Int))
	if up && r.Sign() != 0 {
		q.Add(q, big.NewInt(1))
	}
	return q.Int64()
}

// u is the virtual clock at real time t, rounded down: u0 on [t0, t1],
// then advancing at num/den; before t0, the same speed extended back.
func (m *gcraModel) u(t int64) int64 {
	switch {
	case t >= m.t1:
		return m.u0 + mulDiv(t-m.t1, m.num, m.den, false)
	case t >= m.t0:
		return m.u0
	default:
		return max(0, m.u0-mulDiv(m.t0-t, m.num, m.den, true))
	}
}

// realAt is the first real time at which u reaches v (by search).
func (m *gcraModel) realAt(v int64) int64 {
	lo, hi := int64(-1)<<40, int64(1)<<61
	for lo < hi {
		mid := lo + (hi-lo)/2
		if m.u(mid) >= v {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return lo
}

// setLimit starts a new piece of u at now, paused for one ns of u at the
// new speed (the old piece's rounding, paid back).
func (m *gcraModel) setLimit(limit int, now int64) {
	if m.follows {
		m.burst = limit
	}
	m.deepest = max(m.deepest, int64(m.burst)*m.token)
	if limit == m.limit {
		return
	}
	m.u0, m.t0 = m.u(now), now
	m.limit = limit
	m.num, m.den = m.speed()
	m.t1 = now + mulDiv(1, m.den, m.num, true)
}

func (m *gcraModel) setBurst(burst int, now int64) {
	m.burst, m.follows = burst, false
	m.deepest = max(m.deepest, int64(m.burst)*m.token)
}

// rule returns the cost and depth of a call with limit (0: the limit in
// force), its bucket in requests and its clock: a per-call limit runs on
// the real clock at Window/limit (rounded up) per request.
func (m *gcraModel) rule(limit int) (tok, depth int64, burst int, alt bool) {
	if limit == 0 {
		return m.token, int64(m.burst) * m.token, m.burst, false
	}
	tok = max(1, (m.window+int64(limit)-1)/int64(limit))
	burst = max(1, limit*m.burst/m.limit)
	return tok, int64(burst) * tok, burst, true
}

// clock is the time t reads on the real clock (alt) or u.
func (m *gcraModel) clock(t int64, alt bool) int64 {
	if alt {
		return max(t, 0)
	}
	return m.u(t)
}

// realOf is the first real time at which the clock reads v.
func (m *gcraModel) realOf(v int64, alt bool) int64 {
	if alt {
		return v
	}
	return m.realAt(v)
}

// converted is k's time moved to the other clock: from u, the first real
// time u reaches it; from real, one tick past u of the ns before it.
func (m *gcraModel) converted(k gcraKey) gcraKey {
	if k.alt {
		if k.at > 0 {
			k.at = m.u(k.at-1) + 1
		}
	} else if k.hist {
		// A Reset key's word: dated the bound before the real time at
		// which u passes its time plus the bound.
		b := m.bound()
		k.at = max(0, m.realAt(k.at+b)-b)
	} else {
		k.at = m.realAt(k.at)
	}
	k.alt = !k.alt
	return k
}

// allow decides n at real time t (rel ns); clock is the clock's reading
// (a new key counts at the later of t and the clock).
func (m *gcraModel) allow(key string, n, limit int, t, clock int64) Decision {
	tok, depth, burst, alt := m.rule(limit)
	if limit > 0 {
		m.deepest = max(m.deepest, depth)
	}
	if limit < 0 || n <= 0 || n > burst {
		return Decision{Limit: burst, RetryAfter: Never}
	}
	k, ok := m.keys[key]
	u := m.clock(t, alt)
	if !ok {
		// A new key counts at the later of t and the clock; its figures
		// are still measured from t, the request's own time.
		u = m.clock(max(t, clock), alt)
		k = &gcraKey{at: u, alt: alt}
		m.keys[key] = k
	}
	if k.alt != alt {
		*k = m.converted(*k)
	}
	eff, base := u, max(k.at, u)
	if k.reset {
		eff = max(k.at, u)
		base = eff
	}
	next := base + int64(n)*tok
	d := Decision{Allowed: next-eff <= depth, Limit: burst}
	after := base
	switch {
	case d.Allowed:
		after = next
	case m.penalty:
		next = min(next, eff+2*depth)
		if k.reset || next > k.at {
			after = next
		}
	}
	if after != base || d.Allowed || (m.penalty && k.reset) {
		k.at, k.reset = after, false
	}
	if debt := after - eff; debt < depth {
		d.Remaining = int((depth - debt) / tok)
	}
	d.ResetAfter = time.Duration(max(0, m.realOf(after, alt)-t))
	if !d.Allowed {
		d.RetryAfter = time.Duration(m.realOf(after+int64(n)*tok-depth, alt) - t)
		if d.RetryAfter <= 0 {
			d.RetryAfter = Never
		}
	}
	return d
}

func (m *gcraModel) peek(key string, t int64) Decision {
	tok, depth, burst, _ := m.rule(0)
	kp, ok := m.keys[key]
	if !ok {
		return Decision{Allowed: true, Limit: burst, Remaining: burst}
	}
	k := *kp
	if k.alt {
		k = m.converted(k) // judged as AllowN would, without writing
	}
	u := m.u(t)
	eff, base := u, max(k.at, u)
	if k.reset {
		eff = max(k.at, u)
		base = eff
	}
	d := Decision{Allowed: base+tok-eff <= depth, Limit: burst}
	if debt := base - eff; debt < depth {
		d.Remaining = int((depth - debt) / tok)
	}
	d.ResetAfter = time.Duration(max(0, m.realAt(base)-t))
	if !d.Allowed {
		d.RetryAfter = time.Duration(m.realAt(base+tok-depth) - t)
		if d.RetryAfter <= 0 {
			d.RetryAfter = Never
		}
	}
	return d
}

// reset forgets the key's debt: a mark at the clock reading now, from
// which its bucket is full; a key never Reset that owes nothing is left
// as it is.
func (m *gcraModel) reset(key string, now int64) {
	if k, ok := m.keys[key]; ok {
		c := m.clock(now, k.alt)
		if !k.hist && !k.reset && k.at <= c {
			return
		}
		k.at, k.reset, k.hist = c, true, true
	}
}

// Randomized traces against the model, every Decision field compared:
// bursts, per-call limits, Peek, Reset, SetLimit and SetBurst, callers'
// times behind and ahead of the clock, with a frozen clock and a moving
// one, with and without penalty.
func TestGCRAMatchesModel(t *testing.T) {
	for _, moving := range []bool{false, true} {
		for _, pen := range []bool{false, true} {
			for seed := uint64(1); seed <= 12; seed++ {
				name := fmt.Sprintf("moving=%v/penalty=%v/seed=%d", moving, pen, seed)
				t.Run(name, func(t *testing.T) { runGCRAModel(t, seed, moving, pen) })
			}
		}
	}
}

func runGCRAModel(t *testing.T, seed uint64, moving, penalty bool) {
	rng := rand.New(rand.NewPCG(seed, 22))
	window := time.Duration(1+rng.IntN(1000)) * time.Millisecond
	limit := 1 + rng.IntN(12)
	maxLimit := limit + rng.IntN(3)*rng.IntN(10)
	burst := 0
	if rng.IntN(2) == 0 {
		burst = 1 + rng.IntN(20)
	}
	clk := &fakeClock{}
	clk.t.Store(int64(time.Hour))
	l := newLimiter(t, Config{Algorithm: GCRA, Limit: limit, MaxLimit: maxLimit, Burst: burst, Window: window,
		Penalty: penalty, Clock: clk, SweepInterval: MaxWindow})
	m := newGCRAModel(limit, burst, maxLimit, window, penalty)
	epoch := clk.Now()
	keys := []string{"a", "b", "c", "d"}
	for step := 0; step < 3000; step++ {
		if moving {
			clk.t.Add(rng.Int64N(int64(window) / 3))
		}
		now := clk.Now() - epoch
		at := now
		switch rng.IntN(4) {
		case 0:
			at = max(0, now-rng.Int64N(int64(window))) // late
		case 1:
			at = now + rng.Int64N(int64(window)+1) // early, at most one Window
		}
		key := keys[rng.IntN(len(keys))]
		var got, want Decision
		op := rng.IntN(20)
		switch {
		case op < 12:
			n := 1 + rng.IntN(3)
			if rng.IntN(30) == 0 {
				n = 40 // above any bucket: Never
			}
			got, want = l.AllowNAt(key, n, Time(at+epoch)), m.allow(key, n, 0, at, now)
		case op < 15:
			lim, n := 1+rng.IntN(15), 1+rng.IntN(2)
			got, want = l.AllowNWithLimitAt(key, n, lim, Time(at+epoch)), m.allow(key, n, lim, at, now)
		case op < 17:
			got, want = l.PeekAt(key, Time(at+epoch)), m.peek(key, at)
		case op == 17:
			l.Reset(key)
			m.reset(key, now)
			continue
		case op == 18:
			lim := 1 + rng.IntN(maxLimit)
			if err := l.SetLimit(lim); err != nil {
				t.Fatal(err)
			}
			m.setLimit(lim, now)
			continue
		default:
			if rng.IntN(4) != 0 {
				continue
			}
			b := 1 + rng.IntN(15)
			if err := l.SetBurst(b); err != nil {
				t.Fatal(err)
			}
			m.setBurst(b, now)
			continue
		}
		if got != want {
			t.Fatalf("step %d (op %d, key %s, at %d, clock %d): engine %+v, model %+v", step, op, key, at, now, got, want)
		}
	}
}
