package httplimit

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"reflect"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/slidelimit/slidelimit/engine"
)

// ErrUnknownRule is wrapped by the error of SetLimit and SetBurst for a
// rule name that no rule of the Middleware has.
var ErrUnknownRule = errors.New("httplimit: no rule has this name")

// ErrFixedLimit is wrapped by the error of SetLimit and SetBurst for a
// rule whose backend cannot change its numbers while serving: a ready
// Limiter that is not an *engine.Limiter (a redisstore.Store, say).
var ErrFixedLimit = errors.New("httplimit: the rule's backend cannot change its limit while serving")

// policy is what a rule advertises for one setting of its numbers. It is
// immutable once published, so a request that loaded it formats q, w and
// X-RateLimit-Limit from one setting (no torn header across a SetLimit).
type policy struct {
	q        int    // the quota advertised: Decision.Limit (Limit; GCRA: Burst)
	item     string // RateLimit-Policy item: "name";q=..;w=..
	limitStr string // X-RateLimit-Limit value
	wSec     int64  // w: the window in seconds (GCRA: a full bucket's refill time), rounded up
	name     string // the rule's, for a policy rendered from a decision
	s        shape  // the numbers it was computed from
	follows  bool   // GCRA: the bucket follows the limit (no Burst of its own)
	// older holds the settings published before this one, newest first,
	// at most historyLen, each with older nil (so the chain stays
	// bounded): a decision made under one of them finds its own.
	older []*policy
	from  *policy // a policy rendered from a decision: the newest it was rendered beside
}

// historyLen is how many earlier settings a published policy keeps. A
// decision older than that many changes (its request stalled between the
// engine's decision and the headers while SetLimit ran on and on) gets
// its policy rendered from its own numbers instead (live.render).
const historyLen = 8

// live is a rule's changeable part, shared by the rule and SetLimit.
type live struct {
	pol atomic.Pointer[policy]
	// changed is set by the first SetLimit or SetBurst: from then on a
	// decision whose Limit no published setting has is given a policy of
	// its own numbers. Before it a rule advertises exactly what it did at
	// New (a backend's decisions agree with its policy then).
	changed atomic.Bool
	// spill caches the last policy rendered from a decision, so that a
	// run of such decisions (another Middleware's SetLimit on a shared
	// limiter, say) allocates once, not per request.
	spill atomic.Pointer[policy]
}

// shape is the numbers a rule's policy is computed from.
type shape struct {
	alg    engine.Algorithm
	limit  int
	burst  int // GCRA's bucket; the limit for the others
	window time.Duration
}

func newPolicy(name string, s shape) *policy {
	q := s.limit
	w := ceilSeconds(s.window)
	if s.alg == engine.GCRA && s.burst > 0 {
		q = s.burst
		w = refillSeconds(s.burst, s.window, s.limit)
	}
	return &policy{
		q:        q,
		item:     `"` + name + `";q=` + strconv.Itoa(q) + ";w=" + strconv.FormatInt(w, 10),
		limitStr: strconv.Itoa(q),
		wSec:     w,
		name:     name,
		s:        s,
		follows:  s.alg == engine.GCRA && s.burst == s.limit,
	}
}

// refillSeconds is the time a GCRA bucket of burst takes to refill at
// limit per window, burst x window / limit, rounded up to seconds: the
// draft-11 w of a token bucket, whose quota q (the bucket) is what a
// client can send at once and what comes back within w of its last
// request. Computed in 128 bits: burst x window overflows int64.
func refillSeconds(burst int, window time.Duration, limit int) int64 {
	if burst <= 0 || window <= 0 || limit <= 0 {
		return 0
	}
	hi, lo := bits.Mul64(uint64(burst), uint64(window))
	div := uint64(limit) * uint64(time.Second) // limit <= 2^30: fits
	if hi >= div {
		return math.MaxInt64
	}
	q, r := bits.Div64(hi, lo, div)
	if r != 0 {
		q++
	}
	if q > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(q)
}

// current returns the policy to advertise with decision d: the newest
// setting whose q is d.Limit. The engine's decision says its Limit and
// nothing else of the numbers it was made under, so the match is by q:
//
//   - The newest policy, in the common case (no allocation, one compare).
//   - While SetLimit and SetBurst run, the newest of the last historyLen
//     settings with that q: a decision made under any of them finds a
//     policy with its own q. Its w is that setting's; it is the w the
//     decision was made under except for a GCRA rule whose limit and
//     bucket both changed within those settings, where two settings with
//     the same bucket and different refill times can be told apart by
//     nothing in the decision (the newer one's w is given).
//   - Older still (the request stalled while more changes ran), or a
//     change made on the engine behind this Middleware's back: a policy
//     rendered from d's numbers (render), one allocation, cached.
func (lv *live) current(d *engine.Decision) *policy {
	p := lv.pol.Load()
	if p.q == d.Limit || d.Limit <= 0 || !lv.changed.Load() {
		return p
	}
	for _, o := range p.older {
		if o.q == d.Limit {
			return o
		}
	}
	return lv.render(p, d.Limit)
}

// render returns a policy with q, the quota a decision was made under,
// beside the newest policy p, which says the rest: the window (no change
// moves it) and, for a GCRA rule with a Burst of its own, the limit (q is
// its bucket, and the refill time w is q x window / limit; with the
// bucket following the limit, w is the window whatever q is). Cached in
// lv.spill for as long as p is the newest.
func (lv *live) render(p *policy, q int) *policy {
	if sp := lv.spill.Load(); sp != nil && sp.from == p && sp.q == q {
		return sp
	}
	s := p.s
	switch {
	case s.alg != engine.GCRA:
		s.limit, s.burst = q, q
	case p.follows:
		s.limit, s.burst = q, q
	default:
		s.burst = q
	}
	np := newPolicy(p.name, s)
	np.follows = p.follows
	np.from = p
	lv.spill.Store(np)
	return np
}

// SetLimit changes the limit of the rule named rule (and of every rule of
// this Middleware sharing its *engine.Limiter; another Middleware sharing
// it decides under the new limit, and advertises its old policy until a
// SetLimit or SetBurst of its own has run on that rule, the q of each
// decision after) on a running Middleware, through
// engine.Limiter.SetLimit: every key keeps its counts (a client that used
// 4 of 5 has 6 more of 10, not 10), and the RateLimit-Policy the rules
// advertise follows (for GCRA with the default Burst the bucket follows
// the limit, as in the engine). Each response's q (and X-RateLimit-Limit)
// is the Limit its decision was made under, however many changes raced
// it; w is that setting's window (GCRA: refill time), except for a GCRA
// rule whose Burst is its own and whose limit changed while the request
// was decided: a SetLimit leaves its q alone and moves only w, and the
// decision does not say which side of the change it was made on, so w
// may be the newer setting's. Errors: ErrUnknownRule; ErrFixedLimit for
// a backend that is not an *engine.Limiter; the engine's, wrapping
// engine.ErrInvalidLimit above the limiter's Config.MaxLimit (the limit in
// force stays). Safe for concurrent use with requests and other changes.
func (m *Middleware) SetLimit(rule string, limit int) error {
	return m.change(rule, "SetLimit", func(s *shape, follows bool) {
		if s.alg == engine.GCRA && follows {
			s.burst = limit
		}
		s.limit = limit
	}, func(l *engine.Limiter) error { return l.SetLimit(limit) })
}

// SetBurst changes GCRA's bucket of the rule named rule, like SetLimit
// (engine.Limiter.SetBurst: every key keeps its debt). From then on the
// bucket no longer follows SetLimit. On a rule whose algorithm has no
// burst of its own the error wraps engine.ErrNoBurst.
func (m *Middleware) SetBurst(rule string, burst int) error {
	return m.change(rule, "SetBurst", func(s *shape, _ bool) {
		s.burst = burst
	}, func(l *engine.Limiter) error {
		err := l.SetBurst(burst)
		if err == nil {
			m.burstSet[l] = true
		}
		return err
	})
}

// change applies one SetLimit or SetBurst to the named rule's limiter and
// republishes the policy of every rule on that limiter. The predicted
// policy is published before the engine changes, with the earlier ones
// kept beside it (the last historyLen), so that a decision made under any
// of them finds its own (live.current); the engine's Config is read back afterwards and
// published if the prediction missed (a ready limiter whose Burst was
// set equal to its Limit at New is taken as following the limit).
func (m *Middleware) change(name, op string, predict func(s *shape, follows bool), apply func(*engine.Limiter) error) error {
	ru := m.byName[name]
	if ru == nil {
		return fmt.Errorf("httplimit: %s(%q): %w", op, name, ErrUnknownRule)
	}
	if ru.adj == nil {
		return fmt.Errorf("httplimit: %s(%q) on a %T: %w", op, name, ru.rl, ErrFixedLimit)
	}
	m.liveMu.Lock()
	defer m.liveMu.Unlock()
	l := ru.adj
	cur := shapeOf(l.Config())
	pred := cur
	predict(&pred, cur.burst == cur.limit && !m.burstSet[l])
	var sharing []*rule
	for _, r := range m.byName {
		if r.adj == l {
			sharing = append(sharing, r)
		}
	}
	olds := make([]*policy, len(sharing))
	for i, r := range sharing {
		olds[i] = r.live.pol.Load()
	}
	publish := func(s shape) {
		follows := s.alg == engine.GCRA && s.burst == s.limit && !m.burstSet[l]
		for i, r := range sharing {
			p := newPolicy(r.name, s)
			p.follows = follows
			// The settings before, newest first, bounded: a decision made
			// under any of them finds its own q (live.current).
			o := *olds[i]
			o.older, o.from = nil, nil
			p.older = make([]*policy, 0, historyLen)
			p.older = append(p.older, &o)
			p.older = append(p.older, olds[i].older[:min(len(olds[i].older), historyLen-1)]...)
			r.live.pol.Store(p)
			r.live.changed.Store(true)
		}
	}
	publish(pred)
	if err := apply(l); err != nil {
		for i, r := range sharing {
			r.live.pol.Store(olds[i])
		}
		return fmt.Errorf("httplimit: %s(%q): %w", op, name, err)
	}
	if got := shapeOf(l.Config()); got != pred {
		publish(got)
	}
	return nil
}

func shapeOf(c engine.Config) shape {
	return shape{alg: c.Algorithm, limit: c.Limit, burst: c.Burst, window: c.Window}
}

// configurer is a ready backend that can say its numbers: an
// *engine.Limiter given as Rule.Limiter.
type configurer interface{ Config() engine.Config }

// limiterShape reads the numbers of a ready backend that exposes them:
// Config() engine.Config, or a Config() method whose result is a struct
// with Limit (int) and Window (time.Duration) fields, and optionally
// Algorithm (engine.Algorithm) and Burst (int), as redisstore.Store's
// does (read by reflection, once at New, so that this package needs no
// import of a backend's). ok is false when it exposes none.
func limiterShape(rl engine.RateLimiter) (s shape, ok bool) {
	if c, isC := rl.(configurer); isC {
		return shapeOf(c.Config()), true
	}
	mv := reflect.ValueOf(rl).MethodByName("Config")
	if !mv.IsValid() || mv.Type().NumIn() != 0 || mv.Type().NumOut() != 1 || mv.Type().Out(0).Kind() != reflect.Struct {
		return shape{}, false
	}
	cv := mv.Call(nil)[0]
	lim, win := cv.FieldByName("Limit"), cv.FieldByName("Window")
	if !lim.IsValid() || lim.Kind() != reflect.Int || !win.IsValid() || win.Type() != reflect.TypeOf(time.Duration(0)) {
		return shape{}, false
	}
	s.limit, s.window = int(lim.Int()), time.Duration(win.Int())
	if a := cv.FieldByName("Algorithm"); a.IsValid() && a.Type() == reflect.TypeOf(engine.Algorithm(0)) {
		s.alg = engine.Algorithm(a.Uint())
	}
	if s.alg == 0 {
		s.alg = engine.DefaultAlgorithm
	}
	if b := cv.FieldByName("Burst"); b.IsValid() && b.Kind() == reflect.Int {
		s.burst = int(b.Int())
	}
	if s.burst == 0 {
		s.burst = s.limit
	}
	return s, true
}
