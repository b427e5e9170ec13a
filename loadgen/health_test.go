package loadgen

import (
	"context"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// A reading of a machine that gave the process all the CPU it needed.
func calmHealth() Health {
	return Health{
		SchedLatencyP99Ns: 20_000, LatenessP99Ns: 50_000, SenderBusyShare: 0.05,
		GCStopP99Ns: 30_000, GCPauseP99Ns: 300_000,
		Proc: true, CPUs: 2, StealShare: 0.001, OtherCPUShare: 0.02, IdleShare: 0.6, Load1: 1.1, CPUPressure: 0.05,
	}
}

// TestEachStarvationSignalMarksTheMachineStarved: every signal, alone on
// an otherwise calm reading, makes the machine starved and names itself
// with its figure; the calm reading is not starved.
func TestEachStarvationSignalMarksTheMachineStarved(t *testing.T) {
	calm := calmHealth()
	calm.judge(true)
	if calm.Starved || len(calm.Reasons) != 0 {
		t.Fatalf("calm machine judged starved: %v", calm.Reasons)
	}
	for _, tc := range []struct {
		name     string
		edit     func(*Health)
		openLoop bool
		want     string // in the reason; "" means not starved
	}{
		{"scheduler latency", func(h *Health) { h.SchedLatencyP99Ns = 600_000 }, true, "Go scheduler latency p99 600.0µs"},
		{"scheduler latency below its threshold", func(h *Health) { h.SchedLatencyP99Ns = 400_000 }, true, ""},
		{"late and idle generator", func(h *Health) { h.LatenessP99Ns = 30_000_000 }, true, "30.00ms late at p99"},
		{"late generator busy in calls: the target is slow", func(h *Health) { h.LatenessP99Ns = 30_000_000; h.SenderBusyShare = 0.9 }, true, ""},
		{"lateness means nothing in closed loop", func(h *Health) { h.LatenessP99Ns = 30_000_000 }, false, ""},
		{"GC pause spent stopping", func(h *Health) { h.GCPauseP99Ns = 200_000_000; h.GCStopP99Ns = 190_000_000 }, true, "of which 190.00ms was stopping the world"},
		{"long GC pause spent collecting", func(h *Health) { h.GCPauseP99Ns = 200_000_000; h.GCStopP99Ns = 2_000_000 }, true, ""},
		{"CPU steal", func(h *Health) { h.StealShare = 0.3 }, true, "CPU steal 30%"},
		{"no idle CPU, others using it", func(h *Health) { h.IdleShare = 0.01; h.OtherCPUShare = 0.8 }, true, "other processes used 80%"},
		{"no idle CPU, all of it ours", func(h *Health) { h.IdleShare = 0.01; h.OtherCPUShare = 0.05 }, true, ""},
		{"load average far above the CPUs", func(h *Health) { h.Load1 = 9.3 }, true, "load average 9.3 on 2 CPUs"},
		{"machine counters unreadable decide nothing", func(h *Health) { h.Proc = false; h.Load1 = 50; h.StealShare = 0.9 }, true, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := calmHealth()
			tc.edit(&h)
			h.judge(tc.openLoop)
			if tc.want == "" {
				if h.Starved {
					t.Fatalf("judged starved: %v", h.Reasons)
				}
				return
			}
			if !h.Starved || len(h.Reasons) != 1 || !strings.Contains(h.Reasons[0], tc.want) {
				t.Fatalf("starved %v, reasons %q; want one reason containing %q", h.Starved, h.Reasons, tc.want)
			}
		})
	}
}

// TestOutcomeSeparatesTheLimiterFromTheMachine: a miss of a
// machine-dependent check is INCONCLUSIVE on a starved machine and FAIL on
// a calm one; a miss of the limiter's own check is FAIL on either.
func TestOutcomeSeparatesTheLimiterFromTheMachine(t *testing.T) {
	latency := func(pass bool) Check { return Check{Name: "latency p99", Pass: pass, Counted: true, Machine: true} }
	service := func(pass bool) Check { return Check{Name: "limiter service time p99", Pass: pass, Counted: true} }
	info := Check{Name: "GC CPU share", Counted: false}
	starved := Health{Starved: true, Reasons: []string{"load"}}
	for _, tc := range []struct {
		name        string
		checks      []Check
		h           Health
		interrupted bool
		want        Outcome
	}{
		{"all met, calm", []Check{latency(true), service(true), info}, Health{}, false, OutcomePass},
		{"all met, starved", []Check{latency(true), service(true), info}, starved, false, OutcomePass},
		{"latency missed, calm", []Check{latency(false), service(true)}, Health{}, false, OutcomeFail},
		{"latency missed, starved", []Check{latency(false), service(true)}, starved, false, OutcomeInconclusive},
		{"service missed, starved", []Check{latency(false), service(false)}, starved, false, OutcomeFail},
		{"service missed, calm", []Check{latency(true), service(false)}, Health{}, false, OutcomeFail},
		{"interrupted, nothing missed", []Check{latency(true), service(true)}, Health{}, true, OutcomeIncomplete},
		{"interrupted, latency missed, starved", []Check{latency(false), service(true)}, starved, true, OutcomeInconclusive},
	} {
		if got := decide(tc.checks, tc.h, tc.interrupted); got != tc.want {
			t.Errorf("%s: %s, want %s", tc.name, got, tc.want)
		}
	}
}

// strictLatency is a run whose latency objective no request can meet
// (1 ns), so the run's outcome shows how the miss of a machine-dependent
// check was judged; everything that is not about the machine is met
// with room to spare.
func strictLatency() Config {
	c := testConfig()
	c.Objectives.LatencyP99 = time.Nanosecond
	c.Objectives.HeapGrowthPct = 1000
	c.Objectives.ServiceP99 = time.Second
	return c
}

func firstLine(t *testing.T, r *Result) string {
	t.Helper()
	var b strings.Builder
	if err := r.WriteVerdict(&b); err != nil {
		t.Fatal(err)
	}
	return strings.SplitN(strings.TrimLeft(b.String(), "\n"), "\n", 2)[0]
}

// TestLatencyMissIsInconclusiveOnStarvedMachineAndFailOnCalmOne: the same
// run, its readings replaced by those of a starved and of a calm machine.
func TestLatencyMissIsInconclusiveOnStarvedMachineAndFailOnCalmOne(t *testing.T) {
	c := strictLatency()
	c.testHealth = func(h *Health) { *h = calmHealth(); h.Load1 = 12 }
	r := mustRun(t, c)
	if r.Outcome != OutcomeInconclusive || r.Pass || !r.Health.Starved {
		t.Fatalf("starved machine: outcome %s, pass %v, health %+v; want INCONCLUSIVE", r.Outcome, r.Pass, r.Health)
	}
	line := firstLine(t, r)
	if !strings.HasPrefix(line, "VERDICT: INCONCLUSIVE: ") || !strings.Contains(line, "latency p99") {
		t.Errorf("first line %q: want the INCONCLUSIVE verdict naming the latency miss", line)
	}
	v := r.words()
	if len(v.Trust) == 0 || !strings.HasPrefix(v.Trust[0], "limiter service time p99: ") {
		t.Errorf("figures to trust %q: want the limiter's service time first", v.Trust)
	}
	if row := check(t, r, "latency p99"); row.result(r.Health.Starved) != "STARVED" {
		t.Errorf("latency row result %q, want STARVED", row.result(r.Health.Starved))
	}

	c.testHealth = func(h *Health) { *h = calmHealth() }
	r = mustRun(t, c)
	if r.Outcome != OutcomeFail || r.Health.Starved {
		t.Fatalf("calm machine: outcome %s, health %+v; want FAIL", r.Outcome, r.Health)
	}
	if line := firstLine(t, r); !strings.HasPrefix(line, "VERDICT: FAIL: missed latency p99") {
		t.Errorf("first line %q: want the FAIL verdict first", line)
	}
}

// TestServiceTimeMissFailsEvenOnStarvedMachine: the limiter's own service
// time does not depend on the CPU the process got, so its miss is a FAIL
// whatever the machine's state.
func TestServiceTimeMissFailsEvenOnStarvedMachine(t *testing.T) {
	c := testConfig()
	c.Objectives.ServiceP99 = time.Nanosecond // below any call's duration
	c.Objectives.HeapGrowthPct = 1000
	c.testHealth = func(h *Health) { *h = calmHealth(); h.Load1 = 12 }
	r := mustRun(t, c)
	if r.Outcome != OutcomeFail || !r.Health.Starved {
		t.Fatalf("outcome %s, starved %v: want FAIL on a starved machine", r.Outcome, r.Health.Starved)
	}
	if line := firstLine(t, r); !strings.HasPrefix(line, "VERDICT: FAIL: the limiter missed limiter service time p99") {
		t.Errorf("first line %q", line)
	}
	if row := check(t, r, "limiter service time p99"); row.Pass || !row.Counted || row.Machine {
		t.Errorf("service row %+v: want a counted, failed limiter check", row)
	}
}

// TestBusyGoroutinesMakeTheRunStarvedNeverFailed: a real run while busy
// goroutines hold every P of the process. The senders wait for a P behind
// them (Go preempts a running goroutine only after 10 ms), which the
// scheduler-latency and lateness signals see. Whatever the latency figures
// are, the outcome is PASS or INCONCLUSIVE, never FAIL: the checks that do
// not depend on the machine (service time, engine counters, errors) are met
// with room to spare, and heap growth is set out of the way.
func TestBusyGoroutinesMakeTheRunStarvedNeverFailed(t *testing.T) {
	c := testConfig()
	c.Warmup, c.Duration = 200*time.Millisecond, time.Second
	c.Objectives.HeapGrowthPct = 1000
	var stop atomic.Bool
	var wg sync.WaitGroup
	for range runtime.GOMAXPROCS(0) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
			}
		}()
	}
	r, err := Run(context.Background(), c)
	stop.Store(true)
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	if r.Outcome != OutcomePass && r.Outcome != OutcomeInconclusive {
		var b strings.Builder
		_ = r.WriteVerdict(&b)
		t.Fatalf("outcome %s with busy goroutines, want PASS or INCONCLUSIVE:\n%s", r.Outcome, b.String())
	}
	if !r.Health.Starved {
		t.Errorf("busy goroutines on every P not seen as starvation: %s", r.Health.figures())
	}
	t.Logf("%s: %q", r.Outcome, r.Health.Reasons)
}
