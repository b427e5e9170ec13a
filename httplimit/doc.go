// Package httplimit is net/http middleware that rate-limits requests per key
// with the sliding-window limiters of package engine, or any other backend
// that satisfies engine.RateLimiter (the Redis store of package redisstore).
//
// A Middleware holds an ordered list of rules and a default rule. For each
// request the first rule whose method, path prefix and tier all match wins;
// the default rule takes what no rule matched. The winning rule's key
// function names the client (socket IP by default), the rule's backend
// decides, and the request is either passed on or answered with 429 Too
// Many Requests. Middleware.Handler has the shape func(http.Handler)
// http.Handler, so it composes with http.ServeMux, chi, gorilla and others.
//
// Guarantees and invariants:
//
//   - Every request a rule decided carries RateLimit-Policy and RateLimit
//     (draft-ietf-httpapi-ratelimit-headers-11 syntax, e.g.
//     `RateLimit-Policy: "api";q=100;w=60` and `RateLimit: "api";r=42;t=30`)
//     and the legacy X-RateLimit-Limit, X-RateLimit-Remaining and
//     X-RateLimit-Reset (seconds until the key's window is empty, rounded
//     up). A denied request also carries Retry-After in whole seconds,
//     rounded up and at least 1, so a client that honours it is never
//     refused for retrying too early.
//   - Two rules never share limiter state: a rule built from an
//     engine.Config owns its engine.Limiter, and a rule handed a ready
//     RateLimiter (which may be shared) prefixes its keys with its name and
//     a NUL byte, a byte no rule name contains.
//   - Forwarding headers (X-Forwarded-For, Forwarded, X-Real-IP) are
//     believed only when the socket peer lies in a configured trusted
//     proxy prefix, and the chain is walked right to left past trusted hops
//     only, so a client cannot choose its own key by sending the header.
//     With no trusted proxies (the default) the key is the socket address.
//   - IPv6 clients are keyed by their /64 (configurable) so that one host
//     cannot dodge its limit by rotating through its own prefix; IPv4
//     clients by /32 (configurable).
//   - A key function error never panics and never reaches the backend: the
//     request fails open (passed on, unlimited) or closed (refused), as
//     configured, and is counted either way.
//   - In dry-run mode every decision is made, counted and advertised in the
//     headers, but no request is refused; denials are counted as
//     DryRunDenied.
//   - Middleware is safe for concurrent use. Its counters are striped
//     across cache lines; Stats sums them and may miss operations that
//     race with it.
//
// Cost: on the allowed path the middleware adds two small allocations (one
// string holding the per-request header values, one slice backing the five
// header value lists) to whatever the backend and key function cost; the
// policy and limit values are formatted once per rule at New.
package httplimit
