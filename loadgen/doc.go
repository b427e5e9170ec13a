// Package loadgen is slidelimit's load generator: it drives a limiter (in
// process, or a gateway over loopback HTTP) with a chosen key stream and
// arrival pattern, measures request latency and the Go runtime's garbage
// collector, and renders a verdict against the service-level objectives
// (P99 < 2 ms, the limiter's own service time p99 < 100 µs, GC pause p99
// < 5 ms, heap growth < 5 % over the steady state).
//
// The verdict measures the limiter, not the machine. Latency from the
// intended start, GC pauses and the achieved rate depend on the CPU the
// process got; the limiter's service time (the call alone), the admitted
// count and the engine's counters do not. The run also reads how starved
// the process was (see Health: Go scheduler latency, the generator's
// lateness while idle, GC stop-the-world spent stopping, CPU steal, a
// machine with no idle CPU left to other processes, a load average far
// above the CPUs). The Outcome is PASS when every objective is met; FAIL
// when one of the limiter's own checks missed, or a machine-dependent one
// on a machine that was not starved; INCONCLUSIVE when only
// machine-dependent checks missed on a starved machine (the report then
// says why, and which figures to trust); INCOMPLETE when interrupted.
//
// Guarantees and how the figures are taken:
//
//   - Open loop (the default) follows a fixed arrival schedule shared by
//     all senders: request i is due i/Rate after the start, and its latency
//     is measured from that intended time, never from when a sender got
//     round to it. A stall of the target or of the generator therefore
//     shows up in every request that was due during it (no coordinated
//     omission, as in wrk2). A sender waits for a due time by sleeping and
//     then yielding for the last 2 ms, because Go timers below a
//     millisecond fire about a millisecond late on Linux.
//   - A rate that cannot be sustained is reported as such: the verdict
//     compares the achieved rate with the target and fails below
//     Objectives.MinRateShare. Requests still due when the run ends are not
//     sent.
//   - Nothing before the end of the warm-up counts. At that point a forced
//     GC gives the live-heap baseline; the GC pause histogram
//     (/sched/pauses/total/gc:seconds) and the counters are read right
//     after it and right after the last request, so neither forced GC's
//     pause is counted; the final live heap is measured by another forced
//     GC after the load stopped.
//   - Latencies go into HdrHistograms (1 ns to 60 s, 3 significant
//     digits); each sender records into its own, and the reporter swaps
//     and merges them once per interval, so senders do not contend.
//   - The admitted count is checked where the limit fixes it: a single hot
//     key (at most Limit per Window, per the algorithm's bound) and an
//     attack stream of never-seen keys (every request admitted). For the
//     in-process target the engine's own Stats must agree with the
//     senders' counts.
//   - The HTTP target only dials loopback addresses (checked on the URL and
//     again on the dialled address); 2xx counts as allowed, 429 as denied,
//     anything else as an error.
//
// Run returns a Result that can be printed as a verdict table, written as
// JSON and as a self-contained HTML report with inline SVG charts.
package loadgen
