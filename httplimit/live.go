package httplimit

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"reflect"
	"strconv"
	"sync"
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
	prev     *policy
}

// live is a rule's changeable part, shared by the rule and SetLimit.
type live struct {
	pol atomic.Pointer[policy]
	mu  sync.Mutex // serializes SetLimit and SetBurst
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

// current returns the policy to advertise with decision d: the one whose
// q is d.Limit when a SetLimit is in flight (the decision was made under
// the previous numbers), else the newest.
func (lv *live) current(d *engine.Decision) *policy {
	p := lv.pol.Load()
	if p.q != d.Limit && p.prev != nil && p.prev.q == d.Limit {
		return p.prev
	}
	return p
}

// SetLimit changes the limit of the rule named rule (and of every rule of
// this Middleware sharing its *engine.Limiter; another Middleware sharing
// it decides under the new limit but advertises its old q until its own
// SetLimit) on a running Middleware, through
// engine.Limiter.SetLimit: every key keeps its counts (a client that used
// 4 of 5 has 6 more of 10, not 10), and the RateLimit-Policy the rules
// advertise follows (for GCRA with the default Burst the bucket follows
// the limit, as in the engine). Each response's q describes the numbers
// its decision was made under. Errors: ErrUnknownRule; ErrFixedLimit for
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
// policy is published before the engine changes, with the previous one
// kept beside it, so that a decision made under either setting finds its
// own (live.current); the engine's Config is read back afterwards and
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
		for i, r := range sharing {
			p := newPolicy(r.name, s)
			o := *olds[i]
			o.prev = nil // one step back is all a decision in flight needs
			p.prev = &o
			r.live.pol.Store(p)
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
