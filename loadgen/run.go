package loadgen

import (
	"context"
	"fmt"
	"math"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/slidelimit/slidelimit/engine"
)

// sleepSlack is how early a waiting open-loop sender wakes before a
// request's intended start, to finish the wait by yielding instead of
// sleeping: on Linux a Go timer shorter than a millisecond fires about a
// millisecond late, which would add that much to every measured latency.
const sleepSlack = 2 * time.Millisecond

// maxSleep bounds one sleep of a waiting sender.
const maxSleep = 50 * time.Millisecond

// runner is one run in progress.
type runner struct {
	cfg     Config
	t       target
	lim     *engine.Limiter // in-process target, nil for HTTP
	base    time.Time
	senders []*sender
	stop    atomic.Bool
	next    atomic.Int64 // open loop: the next schedule slot to claim
	endNS   atomic.Int64 // senders stop at this offset from base; set when the steady state starts
	perNS   float64      // open loop: nanoseconds between intended starts
}

func (r *runner) now() int64 { return int64(time.Since(r.base)) }

// Run performs one load-generator run and returns its result. It returns
// early with Result.Interrupted set when ctx is cancelled (the figures then
// cover the part that ran), and an error wrapping ErrInvalidConfig for a
// Config it rejects.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	c, err := cfg.normalize()
	if err != nil {
		return nil, err
	}
	r := &runner{cfg: c}
	var space keySpace
	if c.Dist.usesKeySpace() {
		space = newKeySpace(c.Keys)
	}
	var engCfg engine.Config
	switch {
	case c.URL != "":
		ht := newHTTPTarget(c)
		defer ht.close()
		r.t = ht
		engCfg = c.Engine // the gateway's limit, if the caller described it
	case c.Limiter != nil:
		r.lim = c.Limiter
		engCfg = c.Limiter.Config()
	default:
		l, err := engine.New(c.Engine)
		if err != nil {
			return nil, fmt.Errorf("loadgen: building the limiter: %w", err)
		}
		defer l.Close()
		r.lim = l
		engCfg = l.Config()
	}
	if r.lim != nil {
		r.t = inProcess{r.lim}
	}

	res := &Result{Version: ResultVersion, StartedAt: time.Now().UTC(), Machine: machineInfo(), Config: configInfo(c, engCfg)}
	gens := make([]*keyGen, c.Concurrency)
	r.senders = make([]*sender, c.Concurrency)
	for i := range r.senders {
		r.senders[i] = newSender()
		gens[i] = newKeyGen(c, space, i)
	}
	if c.Mode == OpenLoop {
		r.perNS = 1e9 / c.Rate
	}
	warmNS := int64(c.Warmup)
	// The end is fixed when the steady state actually starts (the reporter
	// may reach the warm-up boundary late on a busy machine), so the
	// steady state always lasts Duration.
	r.endNS.Store(math.MaxInt64)
	if warmNS == 0 {
		r.endNS.Store(int64(c.Duration))
	}

	// Stop the senders when ctx is cancelled; they poll r.stop, which is
	// cheaper than a channel receive per request.
	stopWatch := make(chan struct{})
	defer close(stopWatch)
	interrupted := atomic.Bool{}
	go func() {
		select {
		case <-ctx.Done():
			interrupted.Store(true)
			r.stop.Store(true)
		case <-stopWatch:
		}
	}()

	var (
		steady      = warmNS == 0
		steadyTotal = newTally()
		steadyStart int64
		rtStart     rtSnap
		limStart    engine.Stats
		boundary    uint64 // engine decisions while the steady state's start was taken (see verdict)
		procStart   procSnap
		interval    = newTally()
		lastTick    int64
	)
	if steady {
		// A forced collection gives the live-heap baseline a fresh mark
		// and refreshes the CPU statistics (the runtime updates them only
		// at GC); it runs before the steady state begins.
		runtime.GC()
		rtStart = readRuntime()
		procStart = readProc()
		if r.lim != nil {
			limStart = r.lim.Stats()
		}
	}

	r.base = time.Now()
	var wg sync.WaitGroup
	for i := range r.senders {
		wg.Add(1)
		go func(s *sender, g *keyGen) {
			defer wg.Done()
			if c.Mode == OpenLoop {
				r.openLoop(s, g)
			} else {
				r.closedLoop(s, g)
			}
		}(r.senders[i], gens[i])
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()

	// swapAll takes every sender's interval at (nearly) the same instant;
	// collect then merges them into one point of the series at leisure.
	swapAll := func() []*tally {
		olds := make([]*tally, len(r.senders))
		for i, s := range r.senders {
			olds[i] = s.swap()
		}
		return olds
	}
	collect := func(olds []*tally, isSteady, final bool) {
		interval.reset()
		for i, old := range olds {
			interval.merge(old)
			r.senders[i].giveBack(old)
		}
		now := r.now()
		if final && interval.sent() == 0 {
			return // the senders stopped before the last tick
		}
		if isSteady {
			steadyTotal.merge(interval)
		}
		// The run usually ends a few milliseconds after a tick, and the
		// warm-up may end between two. So short an interval holds too few
		// requests for its p99.9 and max to mean what the other points' do
		// (every line dropped at the end of the plot): its requests count in
		// the totals above, but it is not a point of the series. (Ticks are
		// scheduled an Interval after the previous one was collected, never
		// on a fixed grid, so no other point can be short: a late tick is
		// not followed by an early one.)
		if now-lastTick < int64(c.Interval)/2 {
			lastTick = now // the next point spans from here: its requests are its own
			return
		}
		rt := readRuntime()
		p := pointOf(interval, float64(now)/1e9, float64(now-lastTick)/1e9, isSteady, rt)
		lastTick = now
		res.Series = append(res.Series, p)
		if c.Progress != nil {
			phase := "warm-up"
			if isSteady {
				phase = "steady "
			}
			fmt.Fprintf(c.Progress, "%6.1fs %s rate %8s  p50 %8s  p99 %8s  max %8s  allowed %6.2f%%  errors %d  heap %s  gc %d\n",
				p.TS, phase, formatRate(p.Rate), FormatDuration(p.P50), FormatDuration(p.P99), FormatDuration(p.Max),
				pct(p.Allowed, p.Allowed+p.Denied+p.Errors), p.Errors, formatBytes(p.Heap), p.GCs)
		}
	}

	tick := int64(c.Interval)
	nextTick := tick
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
loop:
	for {
		ev := nextTick
		if !steady && warmNS < ev {
			ev = warmNS
		}
		timer.Reset(time.Duration(ev - r.now()))
		select {
		case <-done:
			break loop
		case <-timer.C:
		}
		now := r.now()
		if !steady && now >= warmNS {
			// The end of the warm-up. The forced GC (see above) belongs to
			// the warm-up; the engine snapshot follows the swap as closely
			// as possible, so both count nearly the same requests as
			// steady. The readings before and after it bound how many
			// decisions fell in between, however long this goroutine was
			// descheduled there.
			runtime.GC()
			var before engine.Stats
			if r.lim != nil {
				before = r.lim.Stats()
			}
			olds := swapAll()
			if r.lim != nil {
				limStart = r.lim.Stats()
				after := r.lim.Stats()
				boundary = (after.Allowed + after.Denied) - (before.Allowed + before.Denied)
			}
			steadyStart = r.now()
			r.endNS.Store(steadyStart + int64(c.Duration))
			collect(olds, false, false)
			rtStart = readRuntime()
			procStart = readProc()
			steady = true
		} else {
			collect(swapAll(), steady, false)
		}
		nextTick = r.now() + tick
	}
	collect(swapAll(), steady, true)
	// The senders stop at endNS; the reporter notices a little later.
	steadyEnd := min(r.now(), r.endNS.Load())
	res.Interrupted = interrupted.Load()
	if !steady {
		// Interrupted during warm-up: nothing was measured.
		res.Verdict = []Check{{Name: "steady state", Objective: "reached", Measured: "interrupted during warm-up"}}
		res.Outcome = OutcomeIncomplete
		return res, nil
	}

	rtEnd := readRuntime() // before the forced GC below: its pause is not the run's
	procEnd := readProc()
	load1, loadOK := readLoad1()
	var limEnd engine.Stats
	if r.lim != nil {
		limEnd = r.lim.Stats()
		res.Limiter = &LimiterInfo{Start: limStart, End: limEnd}
	}
	runtime.GC()
	rtAfter := readRuntime()
	// The key space and the histograms are part of the steady state's
	// live heap: keep them reachable until it has been measured.
	runtime.KeepAlive(gens)
	runtime.KeepAlive(r.senders)

	d := float64(steadyEnd-steadyStart) / 1e9
	s := &res.Steady
	s.DurationS = d
	s.Allowed, s.Denied, s.Errors, s.Clamped = steadyTotal.allowed, steadyTotal.denied, steadyTotal.errors, steadyTotal.clamped
	s.Sent = steadyTotal.sent()
	if d > 0 {
		s.AchievedRate = float64(s.Sent) / d
	}
	if c.Mode == OpenLoop {
		s.TargetRate = c.Rate
	}
	s.Latency = latencyOf(steadyTotal.lat)
	s.Service = latencyOf(steadyTotal.svc)
	if c.Mode == OpenLoop {
		s.Lateness = latencyOf(steadyTotal.late)
	}
	for _, sd := range r.senders {
		if err := sd.err(); err != nil {
			s.FirstError = err.Error()
			break
		}
	}
	res.Percentiles = percentileCurve(steadyTotal)

	g := &res.GC
	g.Cycles = rtEnd.gcCycles - rtStart.gcCycles
	var p99, pmax time.Duration
	g.Pauses, p99, pmax = pauseStats(rtStart.pauses, rtEnd.pauses)
	g.PauseP99Ns, g.PauseMaxNs = int64(p99), int64(pmax)
	if dc := rtAfter.totalCPU - rtStart.totalCPU; dc > 0 {
		g.CPUShare = (rtAfter.gcCPU - rtStart.gcCPU) / dc
	}
	g.HeapLiveStart, g.HeapLiveEnd = rtStart.heapLive, rtAfter.heapLive
	if g.HeapLiveStart > 0 {
		g.HeapGrowthPct = 100 * (float64(g.HeapLiveEnd) - float64(g.HeapLiveStart)) / float64(g.HeapLiveStart)
	}
	g.MemTotalStart, g.MemTotalEnd = rtStart.memTotal, rtAfter.memTotal
	g.GoroutinesStart, g.GoroutinesEnd = rtStart.goroutines, rtEnd.goroutines

	res.Health = health(c, s, g, rtStart, rtEnd, procStart, procEnd, load1, loadOK)
	res.Admission = admission(c, engCfg, r.lim != nil, s)
	res.Verdict = verdict(c, res, boundary)
	res.Outcome = decide(res.Verdict, res.Health, res.Interrupted)
	res.Pass = res.Outcome == OutcomePass
	return res, nil
}

// health gathers the steady state's starvation signals and judges them.
func health(c Config, s *Steady, g *GCInfo, rtStart, rtEnd rtSnap, procStart, procEnd procSnap, load1 float64, loadOK bool) Health {
	var h Health
	_, p99, _ := pauseStats(rtStart.schedLat, rtEnd.schedLat)
	h.SchedLatencyP99Ns = int64(p99)
	_, p99, _ = pauseStats(rtStart.stopping, rtEnd.stopping)
	h.GCStopP99Ns, h.GCPauseP99Ns = int64(p99), g.PauseP99Ns
	if c.Mode == OpenLoop {
		h.LatenessP99Ns = s.Lateness.P99
	}
	if s.DurationS > 0 && c.Concurrency > 0 {
		h.SenderBusyShare = s.Service.Mean * float64(s.Service.Count) / (float64(c.Concurrency) * s.DurationS * 1e9)
	}
	h.machineShares(procStart, procEnd, load1, loadOK)
	if c.testHealth != nil {
		c.testHealth(&h)
	}
	h.judge(c.Mode == OpenLoop)
	return h
}

// openLoop claims schedule slots until the run ends. Slot i's intended
// start is i*perNS after base; a sender that is behind does not wait, so
// the time it was behind is part of the latency it records.
func (r *runner) openLoop(s *sender, g *keyGen) {
	for !r.stop.Load() {
		i := r.next.Add(1) - 1
		intended := int64(float64(i) * r.perNS)
		if intended >= r.endNS.Load() {
			return
		}
		key := g.next()
		if !r.waitUntil(intended) {
			return
		}
		start := r.now()
		if start >= r.endNS.Load() {
			return // behind schedule at the end: the rest is not sent
		}
		allowed, err := r.t.do(key)
		end := r.now()
		s.record(end-intended, end-start, allowed, err)
	}
}

// waitUntil returns when the run clock reaches t (true) or the run is
// stopped (false). It sleeps while t is far and yields the processor for
// the last sleepSlack (see there).
func (r *runner) waitUntil(t int64) bool {
	for {
		d := t - r.now()
		if d <= 0 {
			return true
		}
		if r.stop.Load() {
			return false
		}
		if d > int64(sleepSlack) {
			// Capped so that a stop (Ctrl-C) is noticed promptly.
			time.Sleep(min(time.Duration(d)-sleepSlack, maxSleep))
		} else {
			runtime.Gosched()
		}
	}
}

func (r *runner) closedLoop(s *sender, g *keyGen) {
	for !r.stop.Load() {
		key := g.next()
		start := r.now()
		if start >= r.endNS.Load() {
			return
		}
		allowed, err := r.t.do(key)
		end := r.now()
		s.record(end-start, end-start, allowed, err)
	}
}

func pct(a, b uint64) float64 {
	if b == 0 {
		return 0
	}
	return 100 * float64(a) / float64(b)
}

func pointOf(t *tally, ts, dur float64, steady bool, rt rtSnap) Point {
	p := Point{
		TS: ts, Steady: steady, Allowed: t.allowed, Denied: t.denied, Errors: t.errors,
		P50: t.lat.ValueAtQuantile(50), P90: t.lat.ValueAtQuantile(90), P99: t.lat.ValueAtQuantile(99),
		P999: t.lat.ValueAtQuantile(99.9), Max: t.lat.Max(), Heap: rt.heapObjects, GCs: rt.gcCycles,
	}
	if dur > 0 {
		p.Rate = float64(t.sent()) / dur
	}
	return p
}

// percentileCurve samples the latency distribution at percentiles
// 100*(1-10^-x) for x = 0, 0.1, ... up to the resolution the sample count
// allows (the last point is the maximum).
func percentileCurve(t *tally) []Quantile {
	n := t.lat.TotalCount()
	if n == 0 {
		return nil
	}
	var out []Quantile
	for x := 0.0; x <= 7; x += 0.1 {
		q := 100 * (1 - math.Pow(10, -x))
		if x > 0 && math.Pow(10, x) > float64(n) {
			break
		}
		out = append(out, Quantile{Q: q, Ns: t.lat.ValueAtQuantile(q)})
	}
	return append(out, Quantile{Q: 100, Ns: t.lat.Max()})
}

func configInfo(c Config, e engine.Config) ConfigInfo {
	ci := ConfigInfo{
		Mode: c.Mode.String(), Concurrency: c.Concurrency,
		WarmupS: c.Warmup.Seconds(), DurationS: c.Duration.Seconds(),
		Dist: c.Dist.String(), Seed: c.Seed, Target: "in-process",
		ObjP99Ns: int64(c.Objectives.LatencyP99), ObjGCP99Ns: int64(c.Objectives.GCPauseP99),
		ObjHeapGrowth: c.Objectives.HeapGrowthPct, ObjRateShare: c.Objectives.MinRateShare,
	}
	if c.Mode == OpenLoop {
		ci.TargetRate = c.Rate
	}
	if c.Dist.usesKeySpace() {
		ci.Keys = c.Keys
	}
	if c.Dist.usesZipf() {
		ci.ZipfS = c.ZipfS
	}
	if c.URL != "" {
		ci.Target = c.URL
	}
	if e.Limit > 0 {
		if e.Algorithm != 0 {
			ci.Algorithm = e.Algorithm.String()
		}
		ci.Limit = e.Limit
		ci.WindowS = e.Window.Seconds()
	}
	return ci
}
