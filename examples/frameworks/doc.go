// Package frameworks shows slidelimit's httplimit middleware in chi, gin and
// echo, with the 429 refusals and the RateLimit, RateLimit-Policy and
// Retry-After headers intact on allowed and refused responses alike. It is
// its own module (examples, not the library), so the library's module
// requires none of these frameworks.
//
// chi takes httplimit.Middleware.Handler as it is: its middleware has the
// net/http shape func(http.Handler) http.Handler.
//
// gin and echo pass their own response writers to their handlers. The
// middleware sets its headers when the response is committed, through the
// writer it hands to the next handler (so that an upstream's own
// rate-limit headers cannot replace them, see httplimit.Options.Upstream).
// A handler that writes to the framework's original writer instead skips
// that writer, and an admitted response would go out without RateLimit
// headers. Gin and Echo below route the framework's writer through the
// middleware's for the rest of the chain, and restore it afterwards.
package frameworks
