package engine

import (
	"math/big"
	"time"
)

// logModel is the reference SlidingLog: every recorded timestamp per key,
// in a plain slice, decided by the definition.
type logModel struct {
	limit   int
	window  int64
	res     int64
	penalty bool
	keys    map[string][]int64
	last    map[string]int64
}

func newLogModel(limit int, window time.Duration, res int64, penalty bool) *logModel {
	return &logModel{limit: limit, window: int64(window), res: res, penalty: penalty, keys: map[string][]int64{}, last: map[string]int64{}}
}

// inWindow counts recorded entries in [t-W, t] (W rounded up to ticks).
func (m *logModel) wq() int64 { return (m.window + m.res - 1) / m.res * m.res }

func (m *logModel) allowN(key string, n int, t int64) Decision {
	return m.allowNLimit(key, n, m.limit, t)
}

// allowNLimit decides with a per-call limit (at most the ring size m.limit:
// the key remembers its last m.limit recorded requests whatever the limit).
func (m *logModel) allowNLimit(key string, n, limit int, t int64) Decision {
	d := Decision{Limit: limit}
	if n <= 0 || n > limit || limit > m.limit {
		d.RetryAfter = Never // no wait admits it
		return d
	}
	t = t / m.res * m.res
	if l, ok := m.last[key]; ok && l > t {
		t = l
	}
	ts := m.keys[key]
	in := inside(ts, t, m.wq())
	c := len(in)
	d.Allowed = c+n <= limit
	if d.Allowed || m.penalty {
		for i := 0; i < n; i++ {
			ts = append(ts, t)
		}
		if len(ts) > m.limit {
			ts = ts[len(ts)-m.limit:]
		}
		m.keys[key] = ts
		m.last[key] = t
	}
	after := inside(m.keys[key], t, m.wq())
	d.Remaining = max(0, limit-len(after))
	if !d.Allowed && !m.penalty {
		// the (c+n-limit)-th oldest entry in the window must leave
		e := in[c+n-limit-1]
		d.RetryAfter = time.Duration(e + m.wq() + m.res - t)
	}
	if len(after) > 0 {
		d.ResetAfter = time.Duration(after[len(after)-1] + m.wq() + m.res - t)
	}
	return d
}

func inside(ts []int64, t, wq int64) []int64 {
	var in []int64
	for _, x := range ts {
		if x >= t-wq && x <= t {
			in = append(in, x)
		}
	}
	return in
}

// counterModel is the reference SlidingCounter: the two-window formula in
// exact rational arithmetic.
type counterModel struct {
	limit   int64
	window  int64
	penalty bool
	keys    map[string]*counterState
}

type counterState struct{ win, prev, cur int64 }

func newCounterModel(limit int, window time.Duration, penalty bool) *counterModel {
	return &counterModel{limit: int64(limit), window: int64(window), penalty: penalty, keys: map[string]*counterState{}}
}

func (m *counterModel) allowN(key string, n int, t int64) bool {
	return m.allowNLimit(key, n, m.limit, t)
}

func (m *counterModel) allowNLimit(key string, n int, limit, t int64) bool {
	if n <= 0 || int64(n) > limit {
		return false
	}
	win, el := t/m.window, t%m.window
	s := m.keys[key]
	var prev, cur int64
	if s != nil {
		switch {
		case s.win == win:
			prev, cur = s.prev, s.cur
		case s.win == win-1:
			prev = s.cur
		case s.win > win:
			win, el, prev, cur = s.win, 0, s.prev, s.cur
		}
	}
	est := new(big.Rat).SetFrac64(prev*(m.window-el), m.window)
	est.Add(est, big.NewRat(cur+int64(n), 1))
	ok := est.Cmp(big.NewRat(limit, 1)) <= 0
	if ok || m.penalty {
		m.keys[key] = &counterState{win: win, prev: prev, cur: min(cur+int64(n), 1<<20-1)}
	}
	return ok
}
