// Package grpclimit rate-limits gRPC calls per key with slidelimit's
// limiters: unary and stream server interceptors, client interceptors for
// callers that limit themselves, and an adapter to go-grpc-middleware/v2's
// ratelimit.Limiter. Any engine.RateLimiter decides: the in-memory
// *engine.Limiter, or redisstore's Store or Hybrid for a limit shared by a
// fleet. It is its own module, so that engine and httplimit keep importing
// only the standard library.
//
// A Limiter holds an ordered list of rules and a default rule. For each
// call, the first rule whose Methods match ("/pkg.Service/Method" or
// "/pkg.Service/*") decides, or the default takes what no rule matched
// (none: the call passes unlimited). The rule's key function names the
// client (the peer's IP by default; Metadata for an API key, Method for a
// per-method budget, or any KeyFunc), its backend takes Cost units, and the
// call is passed on or refused.
//
// Guarantees:
//
//   - A call the backend can never admit (its cost above the backend's
//     limit: RetryAfter engine.Never) ends with codes.FailedPrecondition
//     and the rule's QuotaFailure, without RetryInfo or retry-after: no
//     wait helps, so nothing invites a retry.
//   - A refused call ends with codes.ResourceExhausted before the handler
//     runs, with two details a client can read with status.Details:
//     google.rpc.RetryInfo, whose retry_delay is the wait until a retry can
//     pass (the backend's RetryAfter, exact for SlidingLog, plus
//     engine.ClockRefresh for the lag of the engine's cached clock, rounded
//     up to the millisecond; 1 s where a backend's failure policy refused
//     without one), and
//     google.rpc.QuotaFailure, one violation naming the rule (subject
//     "rule:NAME", quota_id NAME, quota_value Limit). A client that waits
//     retry_delay is not refused for retrying too early (with the engine's
//     default clock: unless a saturated scheduler delays the clock's
//     refresh by more than its interval; the retry then gets the few ms
//     left as its new retry_delay).
//   - Every call a rule decided carries draft-ietf-httpapi-ratelimit-headers-11
//     fields in its response header metadata, as package httplimit sends
//     them over HTTP: ratelimit-policy ("api";q=100;w=60, w in seconds
//     rounded up) and ratelimit ("api";r=42). t (the effective window) is
//     given at r=0 only, rounded down: on a refusal, and on the call that
//     took the last unit (one extra Peek). A refusal also carries
//     retry-after in whole seconds, rounded up and at least 1.
//   - Stream interceptors decide once per stream, when it opens; the
//     messages a stream carries take nothing.
//   - Client interceptors refuse locally, with the same status and details
//     a server would send, and the call is never sent.
//   - Two rules never share limiter state: keys are prefixed with the
//     rule's name and a NUL byte, so rules may share one backend. Keys
//     FailOpen takes from FallbackKey are namespaced apart (NAME and 0x01),
//     so a client cannot pick an API key that collides with another
//     client's peer key.
//   - PeerIP keys by the transport peer only (no forwarding metadata is
//     believed), IPv6 grouped by /64 and IPv4 by /32 unless configured, so
//     that one host cannot dodge its limit by rotating through its prefix.
//   - A key function error never panics and never reaches the backend: the
//     call is refused with codes.InvalidArgument, or with FailOpen keyed by
//     FallbackKey (passed unlimited only if that fails too).
//   - A backend error is answered by Options.Backend: the backend's own
//     failure policy (the default), pass, or codes.Unavailable. A call
//     whose context ended while the backend decided gets its context's
//     code (codes.Canceled or codes.DeadlineExceeded) and is not passed on.
//   - Invalid options are rejected by New with an error wrapping
//     ErrInvalidOptions that names the field. A Limiter is safe for
//     concurrent use.
//
// Cost: an admitted call adds to grpc-go's own per-call work the key
// function, the backend's decision and the response metadata: five
// allocations, about 450 bytes, of which the metadata map is two and 400
// bytes (grpc.SetHeader takes a metadata.MD), the namespaced key one, the
// ratelimit value and its list two; the policy text is formatted once per
// rule at New. A refusal adds the status and its two details (the
// QuotaFailure marshalled once per rule at New, the RetryInfo per call).
// bench_test.go measures it against go-grpc-middleware's ratelimit
// interceptor with golang.org/x/time/rate behind it (make bench-grpc).
package grpclimit
