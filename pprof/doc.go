// Package pprof is slidelimit's opt-in debug server: the net/http/pprof
// profiles, a runtime/trace capture, and the limiter's live statistics as
// expvar JSON, on a listener of its own.
//
// Guarantees:
//
//   - The handlers are mounted on the server's own mux, never on
//     http.DefaultServeMux (importing net/http/pprof and expvar registers
//     handlers there as a side effect; this package does not serve it).
//   - Start binds only loopback addresses (127.0.0.0/8, ::1, localhost)
//     unless Options.AllowNonLoopback is set: profiles expose memory
//     contents and cost CPU, so they must not be reachable by accident.
//     The address actually bound is checked again after listening.
//   - The debug server is a separate listener: it never shares the port
//     that serves traffic, and a slow profile request (profile?seconds=30,
//     trace?seconds=5) holds only its own connection.
//   - /debug/limiter reads Limiter.Stats on every request; the figures are
//     as fresh as Stats (which may miss operations in flight).
//
// Endpoints: /debug/pprof/ (index and every named profile: heap,
// goroutine, allocs, block, mutex, threadcreate), /debug/pprof/profile
// (CPU, ?seconds=N), /debug/pprof/trace and /debug/trace (runtime/trace,
// ?seconds=N),
// /debug/pprof/cmdline, /debug/pprof/symbol, /debug/vars (the process's
// expvar variables) and /debug/limiter (the limiter's statistics and the
// debug server's own counters).
package pprof
