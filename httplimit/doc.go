// Package httplimit is net/http middleware that rate-limits requests per key
// with the sliding-window limiters of package engine, or any other backend
// that satisfies engine.RateLimiter (the Redis store of package redisstore).
//
// A Middleware holds an ordered list of rules and a default rule. For each
// request that is not exempt, the first rule whose method, path prefix and
// tier all match decides (with Options.MatchAll, every matching rule
// applies: stacked limits); the default rule takes what no rule matched.
// Each rule's key function names the client (socket IP by default), the
// rule's backend decides, and the request is either passed on or answered
// with 429 Too Many Requests. Middleware.Handler has the shape
// func(http.Handler) http.Handler, so it composes with http.ServeMux, chi,
// gorilla and others.
//
// Guarantees and invariants:
//
//   - Every request a rule decided carries RateLimit-Policy and RateLimit
//     (draft-ietf-httpapi-ratelimit-headers-11 syntax, e.g.
//     `RateLimit-Policy: "api";q=100;w=60` and `RateLimit: "api";r=42`)
//     and the legacy X-RateLimit-Limit, X-RateLimit-Remaining and
//     X-RateLimit-Reset. q is the quota a client can use at once
//     (Decision.Limit: the limit, or a GCRA rule's bucket, Burst), and w
//     the window in seconds, rounded up, never omitted (GCRA: the time a
//     full bucket takes to refill, Burst x Window / Limit, rounded up).
//     Middleware.SetLimit and SetBurst change a rule's numbers while
//     serving, keeping every client's count; each response's q is the
//     one its decision was made under, never the other side of a change.
//     t is draft-11's effective window, "the number of seconds
//     within which the client can use no more than the available quota":
//     it is given at r=0 (a refusal, or the response that took the last
//     unit: one extra Peek), where it is the wait until the next request
//     passes rounded down, and left out with room left, where a sliding
//     window's quota grows again whenever its oldest request leaves it (no
//     backend reports when). X-RateLimit-Reset is that wait rounded up at
//     r=0, else the time until every request counted now has left the
//     window, at most w. A denied request also carries Retry-After in
//     whole seconds, rounded up and at least 1, never earlier than any t
//     in the response (draft-11 section 6), so a client that honours it
//     is never refused for retrying too early. A rule whose backend's
//     Remaining is not the policy's (Rule.RemainingUnknown: a hybrid
//     lease) gives no RateLimit item, X-RateLimit-Remaining or -Reset on
//     admitted requests.
//   - A rule cannot be stepped around by spelling: methods are matched
//     ignoring case (a GET rule also takes HEAD), and paths in the form
//     an upstream may route them by, ignoring case, ";params",
//     backslashes, dot segments, a format suffix (from any dot of the
//     last segment on), percent-escapes (decoded until none is left),
//     trailing dots and whitespace (Unicode's too) of a segment,
//     zero-width and other format characters, fullwidth and overlong
//     UTF-8 forms of ASCII, and everything after a NUL, "?" or "#" once
//     decoded ("/LOGIN", "/login;jsessionid=1", "/login.json",
//     "/login.x.y", "/x/..;/login", "/login%20", "/login..", "/%256cogin",
//     "/login%00x", "/login%3fx", "/login%c2%a0", "/%e2%80%8blogin",
//     "/ｌｏｇｉｎ" and "/login%c0%ae" all fall under "/login"). A request
//     whose X-Original-URL or X-Rewrite-URL path (headers IIS, Symfony and
//     Laminas route by) falls under a rule counts against it too.
//     Matching broadly can only limit more.
//   - Under MatchAll the RateLimit-Policy and RateLimit lists name every
//     applied policy; a request refused by one rule consumes nothing from
//     the others (all are peeked before any is taken; see Options.MatchAll
//     for the one race and its bound).
//   - The wrapped handler's own rate-limit headers (RateLimit*,
//     X-RateLimit-*, X-Rate-Limit-*) never reach the client beside ours:
//     by default ours replace them when the response is committed
//     (Options.Upstream), also after a relayed 1xx cleared the header map.
//     None ever goes out in a trailer section (draft-11: RateLimit MUST
//     NOT). The writer the handler gets passes Flush, Hijack and ReadFrom
//     through and unwraps for http.ResponseController.
//   - The request's context reaches ready backends (AllowNContext,
//     PeekContext): a remote store does not start, or stops waiting for,
//     a call for a client that left. A call already on the wire ends at
//     its deadline (redisstore: at most Config.Timeout after it was sent),
//     because go-redis applies a context's deadline to the socket but does
//     not interrupt a read on cancellation (redis/go-redis#2556).
//   - Two rules never share limiter state: a rule built from an
//     engine.Config owns its engine.Limiter, and a rule handed a ready
//     RateLimiter (which may be shared) prefixes its keys with its name and
//     a NUL byte, a byte no rule name contains. Fallback keys (FailOpen,
//     NewKeyChain, KeyBudget) are namespaced too, so a client cannot pick
//     an API key that collides with another client's IP key.
//   - Forwarding headers (X-Forwarded-For, Forwarded, X-Real-IP) are
//     believed only when the socket peer lies in a configured trusted
//     proxy prefix, and the chain is walked right to left past trusted hops
//     only, so a client cannot choose its own key by sending the header.
//     With no trusted proxies (the default) the key is the socket address.
//   - What each key source trusts: ClientIP trusts the socket and the
//     configured proxies only. Header trusts the client entirely: any
//     value is a fresh allowance, so use it behind key verification, or
//     wrap it in a KeyBudget (a bounded number of new keys per client IP)
//     and NewKeyChain it with ClientIP so a missing key is limited per IP.
//   - IPv6 clients are keyed by their /64 (configurable) so that one host
//     cannot dodge its limit by rotating through its own prefix; IPv4
//     clients by /32 (configurable).
//   - A key function error never panics and never reaches the backend: the
//     request is keyed by the fallback key (FailOpen; passed unlimited only
//     if that fails too) or refused (400), as configured, and is counted.
//   - Exempt requests (Options.Exempt) are passed on untouched: no
//     quota, no headers. Exemptions match narrowly: only a plain path
//     (no dot segments, no segment ending in ".", no ";", "\" or
//     percent-encoding) of a request without a path-override header is
//     exempt by prefix, compared with its case, and methods exactly. CORS preflights
//     never spend a rule's quota: they are decided by Options.Preflight on
//     a quota of their own, or exempt without it.
//   - Refusals default to an RFC 9457 application/problem+json body of type
//     ProblemTypeQuotaExceeded (DenyText keeps text/plain). A request with
//     an Origin header gets Access-Control-Expose-Headers naming the
//     rate-limit headers and Retry-After.
//   - A rule in shadow (Rule.DryRun; Options.DryRun is the default of
//     every rule) makes, counts and advertises every decision in the
//     headers but refuses no request; its refusals are counted as
//     DryRunDenied. A rule with Rule.EnforcePercent below 100 enforces
//     that share of its keys and is in shadow for the rest: a key's
//     cohort is a fixed hash of the rule name and the key, the same on
//     every request, reload, restart and replica, and a change of the
//     percentage moves only the keys between the old and the new
//     threshold (raising it only adds keys). A shadow rule never changes
//     what happens to a request or to the enforcing rules' counts
//     (Options.MatchAll). A rule on trial takes no request away from the
//     rules that enforce it without it: where it decides a key in shadow,
//     the next matching rule that enforces the key (first match), else the
//     Default, applies beside it; a key it cannot find refuses nothing. RuleStats and Event.Shadow tell the enforced
//     and shadow cohorts apart.
//   - Middleware is safe for concurrent use. Its counters (Stats,
//     RuleStats) are striped across cache lines; reading them sums the
//     stripes and may miss operations that race with it. Options.Observe
//     sees every rule decision as it happens, for metrics and logs; this
//     package imports no metrics library.
//   - Middleware.WriteTo and ReadFrom snapshot and restore every rule whose
//     limiter is in memory, by rule name, for a process restart (Redis
//     rules keep their state in Redis and are left out). The snapshot is
//     exact when nothing is decided while it is written; each rule is
//     restored whole or not at all, and one that is gone, changed or
//     refused by its limiter is skipped with an error wrapping
//     ErrRuleNotRestored. A snapshot holds the limiters' key-hash keys:
//     store it as a secret (mode 0600).
//
// Cost: on the allowed path with one rule the middleware adds two small
// allocations (one string holding the per-request header values, and the
// response writer wrapper whose array backs the five header value lists)
// to whatever the backend and key function cost; the policy and limit
// values are formatted once per rule at New. A request with an Origin
// header adds one more (the Expose-Headers list); MatchAll with several
// matching rules adds a Peek per rule.
package httplimit
