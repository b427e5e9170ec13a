package engine

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// The window-rule checker: many goroutines decide on a few hot keys while
// filler keys keep the sweep busy, with short windows, the sweep running,
// stale AllowAt/PeekAt calls mixed in, under the engine's own clock and a
// fake clock that moves in random steps. Every decision on a hot key is
// logged with its time and its place in real time (a global sequence number
// taken before the call and after it returns); the log is then checked
// offline, in both directions:
//
//   - safety: no closed window [t-W, t] holds more than Limit admitted
//     requests (SlidingLog), no aligned window holds more than Limit
//     admitted requests (SlidingCounter);
//   - liveness: no request was denied that the rule admits even when every
//     request that may have been decided before it (every one that started
//     before it ended) is counted against it.
//
// A decision's effective time (the time it counts at, which is the key's
// newest when the request's own time is behind it) is read back from its
// ResetAfter, which the engine computes from the effective time.

type checkOp struct {
	key        int
	n          int
	at         int64 // the time passed to the Limiter (its clock)
	start, end uint64
	d          Decision
	eff        int64 // effective time, ticks (log) or window number (counter)
	effAlt     int64 // counter denials: the other reading of ResetAfter (-1: none)
	el, elAlt  int64 // counter: ns into the effective window, per reading
	recorded   bool
}

type checkCase struct {
	alg     Algorithm
	fake    bool
	penalty bool
}

func TestCheckerWindowRule(t *testing.T) {
	run := 300 * time.Millisecond
	if testing.Short() {
		run = 100 * time.Millisecond
	}
	for _, a := range windowAlgorithms {
		for _, fake := range []bool{false, true} {
			for _, pen := range []bool{false, true} {
				c := checkCase{alg: a, fake: fake, penalty: pen}
				name := fmt.Sprintf("%v/fake=%v/penalty=%v", a, fake, pen)
				t.Run(name, func(t *testing.T) { runChecker(t, c, run) })
			}
		}
	}
}

const (
	checkLimit   = 4
	checkWindow  = 2 * time.Millisecond
	checkSweep   = 3 * time.Millisecond
	checkHot     = 16
	checkFillers = 30000
	checkMaxOps  = 100000 // per worker, to bound the offline check
)

func runChecker(t *testing.T, c checkCase, run time.Duration) {
	var clk *fakeClock
	cfg := Config{Algorithm: c.alg, Limit: checkLimit, Window: checkWindow, SweepInterval: checkSweep, Penalty: c.penalty}
	if c.fake {
		clk = &fakeClock{}
		clk.t.Store(int64(time.Hour))
		cfg.Clock = clk
	}
	l := newLimiter(t, cfg)
	for i := 0; i < checkFillers; i++ {
		l.Allow(fmt.Sprint("filler-", i))
	}

	var seq atomic.Uint64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	if c.fake {
		wg.Add(1)
		go func() { // the fake clock: random steps, sometimes none, sometimes more than a window
			defer wg.Done()
			r := rand.New(rand.NewPCG(1, 2))
			for {
				select {
				case <-stop:
					return
				default:
				}
				step := r.Int64N(int64(checkWindow) / 4)
				if r.IntN(50) == 0 {
					step = r.Int64N(3 * int64(checkWindow))
				}
				clk.t.Add(step)
				time.Sleep(20 * time.Microsecond)
			}
		}()
	}
	wg.Add(1)
	go func() { // filler churn: new keys arrive, old ones go idle and are swept
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			l.Allow(fmt.Sprint("filler-", i%(2*checkFillers)))
		}
	}()
	workers := max(4, runtime.GOMAXPROCS(0))
	logs := make([][]checkOp, workers)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(w), 7))
			var ops []checkOp
			for {
				select {
				case <-stop:
					logs[w] = ops
					return
				default:
				}
				k := r.IntN(checkHot)
				key := fmt.Sprint("hot-", k)
				now := l.Now()
				switch x := r.IntN(20); {
				case x < 2: // a stale Peek: must not disturb the key
					l.PeekAt(key, now-Time(r.Int64N(3*int64(checkWindow))))
					continue
				case len(ops) >= checkMaxOps:
					continue // enough logged; keep the load on
				case x < 5: // a stale request: counts at the key's newest time
					now -= Time(r.Int64N(3 * int64(checkWindow)))
				}
				n := 1
				if r.IntN(8) == 0 {
					n = 2
				}
				op := checkOp{key: k, n: n, at: int64(now), start: seq.Add(1)}
				op.d = l.AllowNAt(key, n, now)
				op.end = seq.Add(1)
				ops = append(ops, op)
			}
		}(w)
	}
	time.Sleep(run)
	close(stop)
	wg.Wait()

	var all []checkOp
	for _, o := range logs {
		all = append(all, o...)
	}
	if len(all) == 0 {
		t.Fatal("no decisions logged")
	}
	var errs []string
	if c.alg == SlidingLog {
		errs = checkLog(l, all, c.penalty)
	} else {
		errs = checkCounter(l, all, c.penalty)
	}
	admitted := 0
	for _, o := range all {
		if o.d.Allowed {
			admitted++
		}
	}
	t.Logf("%d decisions on %d hot keys (%d admitted), %d keys reclaimed", len(all), checkHot, admitted, l.Stats().Reclaimed)
	if len(errs) > 0 {
		if len(errs) > 8 {
			errs = append(errs[:8], fmt.Sprintf("... and %d more", len(errs)-8))
		}
		t.Fatalf("%d violations of the window rule:\n%s", len(errs), strings.Join(errs, "\n"))
	}
}

func byKey(all []checkOp) map[int][]*checkOp {
	m := map[int][]*checkOp{}
	for i := range all {
		m[all[i].key] = append(m[all[i].key], &all[i])
	}
	return m
}

// recordedByEff returns the recorded requests of ops sorted by effective time.
func recordedByEff(ops []*checkOp) []*checkOp {
	var rec []*checkOp
	for _, o := range ops {
		if o.recorded {
			rec = append(rec, o)
		}
	}
	sort.Slice(rec, func(i, j int) bool { return rec[i].eff < rec[j].eff })
	return rec
}

// checkLog checks a SlidingLog history in ticks.
func checkLog(l *Limiter, all []checkOp, penalty bool) []string {
	wq := int64(l.impl.(*logAlgo).wq)
	for i := range all {
		o := &all[i]
		rel := l.rel(o.at)
		now := rel / l.res
		o.eff = now
		if ra := int64(o.d.ResetAfter); ra > 0 {
			newest := (ra+rel%l.res)/l.res + now - wq - 1
			o.eff = max(now, newest)
		}
		o.recorded = o.d.Allowed || penalty
	}
	var errs []string
	for k, ops := range byKey(all) {
		var adm []int64
		for _, o := range ops {
			if o.d.Allowed {
				for j := 0; j < o.n; j++ {
					adm = append(adm, o.eff)
				}
			}
		}
		sort.Slice(adm, func(i, j int) bool { return adm[i] < adm[j] })
		lo := 0
		for hi := range adm {
			for adm[lo] < adm[hi]-wq {
				lo++
			}
			if hi-lo+1 > checkLimit {
				errs = append(errs, fmt.Sprintf("hot-%d: %d admitted in window [%d, %d] ticks (Limit %d)", k, hi-lo+1, adm[hi]-wq, adm[hi], checkLimit))
				break
			}
		}
		rec := recordedByEff(ops)
		for _, d := range ops {
			if d.d.Allowed {
				continue
			}
			in := 0
			i := sort.Search(len(rec), func(i int) bool { return rec[i].eff >= d.eff-wq })
			for ; i < len(rec) && rec[i].eff <= d.eff && in+d.n <= checkLimit; i++ {
				if x := rec[i]; x != d && x.start < d.end {
					in += x.n
				}
			}
			if in+d.n <= checkLimit {
				errs = append(errs, fmt.Sprintf("hot-%d: AllowN(%d) at tick %d (passed %d) denied with at most %d recorded in its window (Limit %d): %+v",
					k, d.n, d.eff, l.rel(d.at)/l.res, in, checkLimit, d.d))
			}
		}
	}
	return errs
}

// checkCounter checks a SlidingCounter history in aligned windows.
func checkCounter(l *Limiter, all []checkOp, penalty bool) []string {
	W := l.window
	for i := range all {
		o := &all[i]
		rel := l.rel(o.at)
		win, el := rel/W, rel%W
		o.eff, o.el, o.effAlt, o.elAlt = win, el, -1, 0
		o.recorded = o.d.Allowed || penalty
		ra := int64(o.d.ResetAfter)
		if ra <= 0 {
			continue
		}
		// ResetAfter runs to the end of the window after the effective one
		// when the key counts requests in the effective window (always after
		// a recorded request), else to the end of the effective window.
		x := (rel + ra) / W
		read := func(w int64) (int64, int64, bool) {
			switch {
			case w == win:
				return w, el, true
			case w > win:
				return w, 0, true // counted at the key's newer window
			}
			return 0, 0, false
		}
		w1, e1, ok1 := read(x - 2)
		w2, e2, ok2 := read(x - 1)
		switch {
		case o.recorded || !ok2:
			if ok1 {
				o.eff, o.el = w1, e1
			}
		case !ok1:
			o.eff, o.el = w2, e2
		default:
			o.eff, o.el, o.effAlt, o.elAlt = w1, e1, w2, e2
		}
	}
	var errs []string
	L := int64(checkLimit)
	for k, ops := range byKey(all) {
		per := map[int64]int64{}
		perWin := map[int64][]*checkOp{} // recorded requests by effective window
		for _, o := range ops {
			if o.d.Allowed {
				per[o.eff] += int64(o.n)
			}
			if o.recorded {
				perWin[o.eff] = append(perWin[o.eff], o)
			}
		}
		for w, c := range per {
			if c > L {
				errs = append(errs, fmt.Sprintf("hot-%d: %d admitted in aligned window %d (Limit %d)", k, c, w, L))
			}
		}
		for _, d := range ops {
			if d.d.Allowed {
				continue
			}
			admits := func(w, el int64) bool {
				var prev, cur int64
				for _, x := range perWin[w] {
					if cur+int64(d.n) > L {
						return false
					}
					if x != d && x.start < d.end {
						cur += int64(x.n)
					}
				}
				for _, x := range perWin[w-1] {
					if prev*(W-el)+(cur+int64(d.n))*W > L*W {
						return false
					}
					if x != d && x.start < d.end {
						prev += int64(x.n)
					}
				}
				return prev*(W-el)+(cur+int64(d.n))*W <= L*W
			}
			if admits(d.eff, d.el) && (d.effAlt < 0 || admits(d.effAlt, d.elAlt)) {
				errs = append(errs, fmt.Sprintf("hot-%d: AllowN(%d) in window %d (+%v) denied though the counts before it admit it: %+v",
					k, d.n, d.eff, time.Duration(d.el), d.d))
			}
		}
	}
	return errs
}
