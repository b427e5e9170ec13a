// Command gateway is an example API gateway: a reverse proxy
// (net/http/httputil) behind the httplimit middleware, configured by a YAML
// file (see gateway.example.yaml, safe by default, and the README's gateway
// section).
//
//	gateway -config gateway.example.yaml -listen 127.0.0.1:8080 -upstream http://127.0.0.1:9000
//	gateway -config gateway.example.yaml -upstream builtin   # a trivial in-process upstream
//
// Signals. SIGHUP reloads the configuration: the file is read and
// validated, and its limiters and proxy are built, before anything changes;
// a file that fails any of that is logged and the running configuration
// keeps serving. A good one becomes current in one atomic swap. Each
// request holds the configuration it started with until it ends, so
// requests in flight never see a reload. Limiter state (and Redis clients,
// and the key budget) is kept for every rule whose name, key source and
// policy are unchanged (the same fingerprint), and released when the last
// configuration holding it has drained (a websocket proxied through keeps
// its configuration's limiters until it closes). The server section
// (client timeouts) is read at start only. SIGTERM or SIGINT stops
// accepting connections and lets requests in flight finish, upgraded
// (hijacked) connections included, up to -shutdown-timeout.
//
// Exit status: 0 stopped cleanly; 1 serving failed after start; 2 bad
// flags or configuration at start (nothing served); 3 the shutdown timeout
// cut requests in flight, each of which is logged with its method, path,
// client and running time.
//
// Guarantees: the configuration is decoded strictly (an unknown field is an
// error naming it and its line), every integer field must be a YAML integer
// (2.9 or 1e3 is an error, never a silent truncation), and every value
// error names its YAML path, e.g.
// "rate_limiting.sliding_window.max_requests: must be > 0, got 0". Route
// rules are tried first, then tiers, then the default policy
// (rate_limiting.sliding_window); with stack: true every matching rule
// applies. Each in-memory rule owns an engine limiter whose key state is
// bounded by memory_limit_mb; keys whose window still holds requests are
// never evicted. A rule with backend: redis or hybrid shares its limit
// through rate_limiting.redis with every gateway using that server.
//
// Proxying: upstream dial and response-header timeouts (60 s each by
// default) answer 504, other upstream failures 502, a request body over
// max_body_bytes (1 MiB) 413. Forwarding headers (X-Forwarded-For, -Proto,
// -Host, Forwarded, X-Real-IP) are passed on only from trusted_proxies,
// with this hop appended; from any other peer they are replaced by what
// the gateway saw.
//
// Observability: with -pprof, the loopback admin listener serves package
// pprof's endpoints and Prometheus /metrics (per-rule decisions by
// outcome, backend errors, decision latency; upstream errors; reloads;
// requests in flight). Logs are JSON (log/slog) on stderr, denials sampled.
// Prometheus is imported here only, never by engine or httplimit.
package main
