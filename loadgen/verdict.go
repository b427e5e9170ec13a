package loadgen

import (
	"fmt"
	"math"
	"time"

	"github.com/slidelimit/slidelimit/engine"
)

// soakHorizon is the steady-state length below which the heap-growth
// figure is reported as weak evidence: the objective is defined over 15
// minutes, and a short run sees neither slow leaks nor many sweeps.
const soakHorizon = 15 * time.Minute

// admission checks the admitted count against what the limit admits, for
// the key streams where that has a closed form.
func admission(c Config, e engine.Config, inProcess bool, s *Steady) Admission {
	a := Admission{Allowed: s.Allowed, OK: true}
	if e.Limit <= 0 || e.Window <= 0 {
		a.Note = "the gateway's limit was not given (-limit and -window): no bound checked"
		return a
	}
	L := float64(e.Limit)
	W := e.Window.Seconds()
	D := s.DurationS
	answered := s.Sent - s.Errors
	switch c.Dist {
	case HotKey:
		windows := math.Floor(D / W)
		// In any closed window of length W the log admits at most Limit,
		// and [t0, t0+D] is covered by floor(D/W)+1 such windows. The
		// counter admits at most Limit per aligned window, and the run
		// touches floor(D/W)+2 of those. Requests in flight when the
		// steady state began were decided in the warm-up but counted in
		// it: Concurrency of slack.
		algo := e.Algorithm
		if algo == 0 {
			algo = engine.DefaultAlgorithm
		}
		switch algo {
		case engine.SlidingLog:
			a.ExpectedMax = uint64(L*(windows+1)) + uint64(c.Concurrency)
		case engine.GCRA:
			// A full bucket (Burst) at the start, then one every W/L:
			// Burst + L x D/W over the run, whatever the alignment.
			burst := float64(e.Burst)
			if e.Burst <= 0 {
				burst = L
			}
			a.ExpectedMax = uint64(burst+L*D/W) + 1 + uint64(c.Concurrency)
		default:
			a.ExpectedMax = uint64(L*(windows+2)) + uint64(c.Concurrency)
		}
		a.Expected = math.Min(float64(answered), L*D/W)
		// With at least two offered requests per admitted slot, each slot
		// is reused as soon as its window passes, so at least Limit per
		// full window (less one) must be admitted. Penalty mode records
		// denials, so a hammering key may admit almost nothing.
		offeredPerWindow := float64(answered) / D * W
		if !e.Penalty && offeredPerWindow >= 2*L && windows >= 2 {
			a.ExpectedMin = uint64(L * (windows - 1))
		}
		a.Check = fmt.Sprintf("hot key, %s: allowed in [%d, %d] (about Limit per Window: %.0f)", algoName(e.Algorithm), a.ExpectedMin, a.ExpectedMax, a.Expected)
		a.OK = s.Allowed <= a.ExpectedMax && s.Allowed >= a.ExpectedMin
	case Attack:
		// Every key is new, so every answered request is admitted: a new
		// key has an empty window, and a key that cannot be tracked is
		// decided as one (OverflowAllow).
		if !inProcess || e.Overflow == engine.OverflowAllow {
			a.Expected = float64(answered)
			a.ExpectedMin, a.ExpectedMax = answered, answered
			a.Check = "attack: every never-seen key admitted"
			a.OK = s.Allowed == answered
		} else {
			a.Note = "OverflowDeny denies keys beyond the key bound: no closed form"
		}
	default:
		a.Note = fmt.Sprintf("no closed-form bound for the %s stream", c.Dist)
	}
	return a
}

func algoName(a engine.Algorithm) string {
	if a == 0 {
		a = engine.DefaultAlgorithm
	}
	return a.String()
}

// verdict builds the rows of the verdict table. boundary is how many
// decisions the engine made between the two Stats readings that bracket
// the start of the steady state (see Run): the uncertainty of the
// engine-stats comparison.
func verdict(c Config, r *Result, boundary uint64) []Check {
	o := c.Objectives
	s := r.Steady
	g := r.GC
	http := c.URL != ""
	var out []Check

	latNote := "from the call"
	if c.Mode == OpenLoop {
		latNote = "from the intended start (no coordinated omission)"
	}
	out = append(out, Check{
		Name: "latency p99", Objective: "< " + FormatDuration(int64(o.LatencyP99)),
		Measured: FormatDuration(s.Latency.P99), Pass: s.Latency.P99 < int64(o.LatencyP99), Counted: true, Machine: true, Note: latNote,
	})

	// The limiter's own time: the call alone, from its start to its
	// return. It does not include waiting for a CPU before the call, so it
	// holds on a busy machine and always decides against the limiter.
	svc := Check{
		Name: "limiter service time p99", Objective: "< " + FormatDuration(int64(o.ServiceP99)),
		Measured: FormatDuration(s.Service.P99),
		Pass:     s.Service.P99 < int64(o.ServiceP99), Counted: !http,
		// The max is left out of the figure: one call descheduled by the
		// OS in the middle is the max on a busy machine, and it is no
		// property of the limiter; the p99 is, short of starvation in
		// more than 1 % of calls.
		Note: fmt.Sprintf("the call alone, the limiter's own time (max %s: a call preempted midway)", FormatDuration(s.Service.Max)),
	}
	if http {
		svc.Name, svc.Objective, svc.Pass = "service time p99", "reported", true
		svc.Note = "a round trip through the gateway, not the limiter alone"
	}
	out = append(out, svc)

	gcNote := fmt.Sprintf("%d pauses in %d GC cycles; bucket upper bound", g.Pauses, g.Cycles)
	if g.Pauses == 0 {
		gcNote = "no GC ran during the steady state"
	}
	if http {
		gcNote = "the load generator's process, not the gateway's; " + gcNote
	}
	out = append(out, Check{
		Name: "GC pause p99", Objective: "< " + FormatDuration(int64(o.GCPauseP99)),
		Measured: fmt.Sprintf("%s (max %s)", FormatDuration(g.PauseP99Ns), FormatDuration(g.PauseMaxNs)),
		Pass:     g.PauseP99Ns < int64(o.GCPauseP99), Counted: !http, Machine: true, Note: gcNote,
	})

	heapNote := fmt.Sprintf("live heap %s -> %s", formatBytes(g.HeapLiveStart), formatBytes(g.HeapLiveEnd))
	if time.Duration(s.DurationS*float64(time.Second)) < soakHorizon {
		heapNote += fmt.Sprintf("; over %.0fs this is weak evidence: make soak runs the 15-minute check", s.DurationS)
	}
	if http {
		heapNote = "the load generator's process, not the gateway's; " + heapNote
	}
	out = append(out, Check{
		Name: "heap growth", Objective: fmt.Sprintf("< %g%%", o.HeapGrowthPct),
		Measured: fmt.Sprintf("%+.2f%%", g.HeapGrowthPct), Pass: g.HeapGrowthPct < o.HeapGrowthPct, Counted: !http, Note: heapNote,
	})

	out = append(out, Check{
		Name: "GC CPU share", Objective: "reported", Measured: fmt.Sprintf("%.2f%%", 100*g.CPUShare),
		Pass: true, Counted: false, Note: "of GOMAXPROCS x wall time; includes the forced GC that measures the final heap",
	})

	if c.Mode == OpenLoop {
		share := 0.0
		if s.TargetRate > 0 {
			share = s.AchievedRate / s.TargetRate
		}
		ch := Check{
			Name: "rate sustained", Objective: fmt.Sprintf(">= %g%% of %s", 100*o.MinRateShare, formatRate(s.TargetRate)),
			Measured: fmt.Sprintf("%s (%.1f%%)", formatRate(s.AchievedRate), 100*share), Pass: share >= o.MinRateShare, Counted: true, Machine: true,
		}
		if !ch.Pass {
			ch.Note = "this machine (or the target) could not keep up with the target rate: lower -rate"
		}
		out = append(out, ch)
	}

	out = append(out, Check{
		Name: "errors", Objective: "0", Measured: fmt.Sprint(s.Errors), Pass: s.Errors == 0, Counted: true, Note: s.FirstError,
	})

	a := r.Admission
	if a.Check != "" {
		// Admitting more than the bound is the limiter's fault whatever the
		// machine did; admitting fewer than the minimum may be the
		// generator's, whose requests a starved machine bunches up (the
		// minimum assumes they were spread over every window).
		out = append(out, Check{
			Name: "admitted count", Objective: fmt.Sprintf("[%d, %d]", a.ExpectedMin, a.ExpectedMax),
			Measured: fmt.Sprint(a.Allowed), Pass: a.OK, Counted: true, Machine: a.Allowed < a.ExpectedMin, Note: a.Check,
		})
	} else if a.Note != "" {
		out = append(out, Check{Name: "admitted count", Objective: "reported", Measured: fmt.Sprint(a.Allowed), Pass: true, Note: a.Note})
	}

	if li := r.Limiter; li != nil {
		// The engine's own counters must agree with what the senders saw,
		// up to the requests in flight when the steady state began and
		// those decided while the senders' tallies were swapped and the
		// engine snapshot taken (boundary, counted by the engine itself, so
		// a reporter descheduled in between widens it as much as needed).
		da := int64(li.End.Allowed - li.Start.Allowed)
		dd := int64(li.End.Denied - li.Start.Denied)
		slack := int64(c.Concurrency) + int64(boundary) + 1
		ok := abs(da-int64(s.Allowed)) <= slack && abs(dd-int64(s.Denied)) <= slack
		out = append(out, Check{
			Name: "engine stats agree", Objective: fmt.Sprintf("within %d", slack),
			Measured: fmt.Sprintf("allowed %d, denied %d", da, dd), Pass: ok, Counted: true,
			Note: "engine.Stats deltas vs the senders' counts",
		})
	}
	return out
}

func abs(x int64) int64 {
	if x < 0 {
		return -x
	}
	return x
}

// decide turns the checks and the machine's health into the outcome:
// a miss of one of the limiter's own checks is a failure whatever the
// machine did; a miss of a machine-dependent check is a failure on a
// healthy machine and inconclusive on a starved one.
func decide(checks []Check, h Health, interrupted bool) Outcome {
	limiterMiss, machineMiss := false, false
	for _, c := range checks {
		if !c.Counted || c.Pass {
			continue
		}
		if c.Machine {
			machineMiss = true
		} else {
			limiterMiss = true
		}
	}
	switch {
	case limiterMiss, machineMiss && !h.Starved:
		return OutcomeFail
	case machineMiss:
		return OutcomeInconclusive
	case interrupted:
		return OutcomeIncomplete
	}
	return OutcomePass
}
