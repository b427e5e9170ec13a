// Command gateway is an example API gateway: a reverse proxy
// (net/http/httputil) behind the httplimit middleware, configured by a YAML
// file (see gateway.example.yaml).
//
//	gateway -config gateway.example.yaml -listen 127.0.0.1:8080 -upstream http://127.0.0.1:9000
//	gateway -config gateway.example.yaml -upstream builtin   # a trivial in-process upstream
//
// Every invalid setting is reported at start, naming the field. On SIGTERM
// or SIGINT the gateway stops accepting connections, lets requests in flight
// finish (up to -shutdown-timeout), closes the limiters and exits 0.
//
// Guarantees: the configuration is decoded strictly (an unknown field is an
// error naming it and its line) and validated completely before the
// gateway listens; every value error names its field path, e.g.
// "rate_limiting.sliding_window.max_requests: must be > 0, got 0". Route
// rules are tried first, then tiers, then the default policy
// (rate_limiting.sliding_window). Each rule and tier owns an in-memory
// engine limiter whose key state is bounded by memory_limit_mb; keys whose
// window still holds requests are never evicted, idle ones are reclaimed
// every cleanup_interval_ms and on demand. The proxy keeps the inbound
// X-Forwarded-For chain and appends the peer it saw.
package main
