package loadgen

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// Health is what the run saw of its own process and of the machine during
// the steady state: whether the process got the CPU it needed for its
// latency and GC figures to measure the limiter rather than the machine.
//
// A process that is starved of CPU (other processes hold the cores, the
// hypervisor steals them) sees every request wait for a thread to run, and
// every GC wait for all threads to stop; the request latency from the
// intended start, the GC pause and the achieved rate then measure the
// machine. The limiter's own service time (the call alone), the admitted
// count and the engine's counters do not depend on it: a request that is
// descheduled in the middle of a call is rare enough not to move the
// service time's p99.
type Health struct {
	// Starved is true when at least one of the signals below crossed its
	// threshold; Reasons says which, with the figures.
	Starved bool     `json:"starved"`
	Reasons []string `json:"reasons,omitempty"`

	// SchedLatencyP99Ns is the p99 of the time goroutines spent runnable
	// before they ran (runtime/metrics /sched/latencies:seconds, bucket
	// upper bound): how long a goroutine that had work waited for a CPU.
	SchedLatencyP99Ns int64 `json:"sched_latency_p99_ns"`
	// LatenessP99Ns (open loop) is the p99 of how late the generator
	// started a request after its intended start, and SenderBusyShare the
	// share of the senders' time spent inside calls (mean service time x
	// requests / (senders x duration)). Late while mostly idle: the
	// generator was not given the CPU; late while busy: the target is
	// slower than the schedule.
	LatenessP99Ns   int64   `json:"lateness_p99_ns,omitempty"`
	SenderBusyShare float64 `json:"sender_busy_share"`
	// GCStopP99Ns is the p99 of the time it took to stop the world for a
	// GC (/sched/pauses/stopping/gc:seconds), part of GCPauseP99Ns, the p99
	// of the whole pause (/sched/pauses/total/gc:seconds). Stopping is
	// waiting for every running thread to reach a safe point: on a starved
	// machine a thread that is descheduled cannot, and the pause is the
	// machine's.
	GCStopP99Ns  int64 `json:"gc_stop_p99_ns"`
	GCPauseP99Ns int64 `json:"gc_pause_p99_ns"`

	// The machine's counters (Linux /proc; Proc is false where they could
	// not be read, and then they decide nothing). CPUs is the number of
	// CPUs /proc/stat lists (the host's, also in a container), the unit of
	// the shares and of the load average.
	Proc bool `json:"proc"`
	CPUs int  `json:"cpus,omitempty"`
	// StealShare is the CPU time the hypervisor gave to other guests, as a
	// share of all CPU time.
	StealShare float64 `json:"steal_share"`
	// OtherCPUShare is the CPU time used by other processes (busy time less
	// this process's), and IdleShare the time the CPUs were idle, both as
	// shares of all CPU time. Other processes using much of the CPU count
	// only on a machine with no idle CPU left: then this process's
	// threads queued behind theirs.
	OtherCPUShare float64 `json:"other_cpu_share"`
	IdleShare     float64 `json:"idle_share"`
	// Load1 is the one-minute load average at the end of the steady state.
	Load1 float64 `json:"load1"`
	// CPUPressure is the share of the time some task on the machine waited
	// for a CPU (/proc/pressure/cpu "some"); -1 where the kernel has no
	// pressure stall information. Reported, not judged: it counts this
	// process's own waiting threads too.
	CPUPressure float64 `json:"cpu_pressure"`
}

// The thresholds of the starvation signals. They describe the machine, not
// the objectives (a strict -p99 must not make a calm machine look starved):
// on a calm machine the scheduler latency and the generator's lateness stay
// in the tens of microseconds at p99, and stopping the world for a GC takes
// microseconds. The latency thresholds are those fractions of the default
// objectives at which the machine's share of the figure is no longer
// small: a quarter of the 2 ms latency objective, half of it, a fifth of
// the 5 ms GC pause objective.
const (
	schedLatencyLimit = 500 * time.Microsecond // sched latency p99 >= 500 µs
	latenessLimit     = time.Millisecond       // lateness p99 >= 1 ms ...
	idleSenders       = 0.5                    // ... while the senders were in calls less than half the time
	gcStopLimit       = time.Millisecond       // stopping p99 >= 1 ms ...
	gcStopDominates   = 0.5                    // ... and at least half the pause p99
	stealLimit        = 0.10                   // CPU steal >= 10 % of all CPU time
	idleLimit         = 0.10                   // CPUs idle < 10 % of the time ...
	otherLimit        = 0.25                   // ... while other processes used >= 25 % of it
	loadPerCPU        = 2.0                    // load average >= 2 runnable tasks per CPU
)

// judge sets h.Starved and h.Reasons from the readings in h.
func (h *Health) judge(openLoop bool) {
	h.Reasons = nil
	add := func(format string, args ...any) { h.Reasons = append(h.Reasons, fmt.Sprintf(format, args...)) }
	if lim := int64(schedLatencyLimit); h.SchedLatencyP99Ns >= lim {
		add("Go scheduler latency p99 %s (>= %s): runnable goroutines waited that long for a CPU",
			FormatDuration(h.SchedLatencyP99Ns), FormatDuration(lim))
	}
	if lim := int64(latenessLimit); openLoop && h.LatenessP99Ns >= lim && h.SenderBusyShare < idleSenders {
		add("the generator started requests %s late at p99 (>= %s) while its calls kept the senders busy only %.0f%% of the time: it was not given the CPU",
			FormatDuration(h.LatenessP99Ns), FormatDuration(lim), 100*h.SenderBusyShare)
	}
	if lim := int64(gcStopLimit); h.GCStopP99Ns >= lim && float64(h.GCStopP99Ns) >= gcStopDominates*float64(h.GCPauseP99Ns) {
		add("GC stop-the-world p99 %s, of which %s was stopping the world (>= %s and >= half): threads waited for a CPU to stop, the collection itself was short",
			FormatDuration(h.GCPauseP99Ns), FormatDuration(h.GCStopP99Ns), FormatDuration(lim))
	}
	if h.Proc {
		if h.StealShare >= stealLimit {
			add("CPU steal %.0f%% (>= %.0f%%): the hypervisor gave the CPUs to other guests", 100*h.StealShare, 100*stealLimit)
		}
		if h.IdleShare < idleLimit && h.OtherCPUShare >= otherLimit {
			add("the CPUs were idle %.0f%% of the time (< %.0f%%) and other processes used %.0f%% of them (>= %.0f%%): this process's threads queued behind theirs",
				100*h.IdleShare, 100*idleLimit, 100*h.OtherCPUShare, 100*otherLimit)
		}
		if h.CPUs > 0 && h.Load1 >= loadPerCPU*float64(h.CPUs) {
			add("load average %.1f on %d CPUs (>= %.0f per CPU): more runnable tasks than CPUs", h.Load1, h.CPUs, loadPerCPU)
		}
	}
	h.Starved = len(h.Reasons) > 0
}

// procSnap is one reading of the machine's CPU counters; ok is false where
// /proc/stat could not be read (not Linux).
type procSnap struct {
	ok     bool
	cpus   int
	total  uint64 // all CPU time, USER_HZ ticks summed over the CPUs
	idle   uint64 // idle + iowait
	steal  uint64
	self   uint64 // this process's utime + stime, the same ticks
	psiOK  bool
	psiUS  uint64 // /proc/pressure/cpu some total, microseconds
	wallNS int64
}

func readProc() procSnap {
	s := procSnap{wallNS: time.Now().UnixNano()}
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return s
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 || !strings.HasPrefix(f[0], "cpu") {
			continue
		}
		if f[0] != "cpu" {
			s.cpus++
			continue
		}
		// cpu user nice system idle iowait irq softirq steal guest guest_nice:
		// guest time is already in user and nice, so the total is the
		// first eight.
		var v [8]uint64
		for i := 0; i < len(v) && i+1 < len(f); i++ {
			v[i], _ = strconv.ParseUint(f[i+1], 10, 64)
		}
		for _, x := range v {
			s.total += x
		}
		s.idle = v[3] + v[4]
		s.steal = v[7]
		s.ok = true
	}
	if b, err := os.ReadFile("/proc/self/stat"); err == nil {
		// The command name (field 2) is in parentheses and may hold
		// spaces: the fields are counted after its closing parenthesis,
		// where utime and stime are the 12th and 13th.
		if i := bytes.LastIndexByte(b, ')'); i >= 0 {
			f := strings.Fields(string(b[i+1:]))
			if len(f) > 12 {
				u, _ := strconv.ParseUint(f[11], 10, 64)
				st, _ := strconv.ParseUint(f[12], 10, 64)
				s.self = u + st
			}
		}
	}
	if b, err := os.ReadFile("/proc/pressure/cpu"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if !strings.HasPrefix(line, "some ") {
				continue
			}
			for _, kv := range strings.Fields(line) {
				if v, ok := strings.CutPrefix(kv, "total="); ok {
					if n, err := strconv.ParseUint(v, 10, 64); err == nil {
						s.psiUS, s.psiOK = n, true
					}
				}
			}
		}
	}
	return s
}

// readLoad1 returns the one-minute load average (/proc/loadavg).
func readLoad1() (float64, bool) {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0, false
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0, false
	}
	v, err := strconv.ParseFloat(f[0], 64)
	return v, err == nil
}

// machineShares fills h's /proc figures from two readings.
func (h *Health) machineShares(a, b procSnap, load1 float64, loadOK bool) {
	h.CPUPressure = -1
	if a.psiOK && b.psiOK && b.wallNS > a.wallNS && b.psiUS >= a.psiUS {
		h.CPUPressure = float64(b.psiUS-a.psiUS) * 1e3 / float64(b.wallNS-a.wallNS)
	}
	if !a.ok || !b.ok || b.total <= a.total {
		return
	}
	h.Proc = true
	h.CPUs = b.cpus
	total := float64(b.total - a.total)
	h.StealShare = float64(sub(b.steal, a.steal)) / total
	busy := sub(b.total-b.idle, a.total-a.idle)
	h.OtherCPUShare = float64(sub(busy, sub(b.self, a.self))) / total
	h.IdleShare = float64(sub(b.idle, a.idle)) / total
	if loadOK {
		h.Load1 = load1
	}
}

// sub is a - b, or 0 where a counter went backwards (a CPU taken offline).
func sub(a, b uint64) uint64 {
	if a < b {
		return 0
	}
	return a - b
}
