// Command gateway is an example API gateway: a reverse proxy
// (net/http/httputil) behind the httplimit middleware, configured by a YAML
// file (see gateway.example.yaml, safe by default, and README.md in this
// directory, the gateway guide).
//
//	gateway -config gateway.example.yaml -listen 127.0.0.1:8080 -upstream http://127.0.0.1:9000
//	gateway -config gateway.example.yaml -upstream builtin   # a trivial in-process upstream
//
// Signals. SIGHUP is caught from the initialization of package
// internal/hupsig on, before the heavy dependencies' initializers and main
// (a SIGHUP before that, in the first milliseconds of the process, ends it
// with status 129 as it ends any Go program). SIGHUP reloads the
// configuration: the file is read and
// validated, and its limiters and proxy are built, before anything changes;
// a file that fails any of that is logged and the running configuration
// keeps serving. A good one becomes current in one atomic swap. Each
// request holds the configuration it started with until it ends, so
// requests in flight never see a reload. Limiter state (and Redis clients,
// and the key budget) is kept for every rule whose name, key source and
// policy are unchanged (the same fingerprint: an ip or route_ip rule is
// untouched by a new key_header or key_budget), and released when the last
// configuration holding it has drained (a websocket proxied through keeps
// its configuration's limiters until it closes). The server section
// (client timeouts and bounds) is read at start only. SIGTERM or SIGINT stops
// accepting connections and lets requests in flight finish, upgraded
// (hijacked) connections included, up to -shutdown-timeout.
//
// Exit status: 0 stopped cleanly; 1 serving failed after start; 2 bad
// flags or configuration at start (nothing served); 3 the shutdown timeout
// cut requests in flight, each of which is logged with its method, path,
// client and running time.
//
// Guarantees: the configuration is decoded strictly, and every error names
// the YAML path (and line) it is about, e.g.
// "rate_limiting.sliding_window.max_requests: must be > 0, got 0": an
// unknown or duplicated field, a value of the wrong YAML type (2.9 or 1e3
// for an integer, explicitly tagged or not), an integer that is not plain
// decimal (YAML reads 0100 as 64), an empty value (null would let a rule
// inherit the default), merge keys ("<<") and aliases are all errors,
// never a silent change of policy. Route
// rules are tried first, then tiers, then the default policy
// (rate_limiting.sliding_window); with stack: true every matching rule
// applies. Each in-memory rule owns an engine limiter whose key state is
// bounded by memory_limit_mb; keys whose window still holds requests are
// never evicted. A rule with backend: redis or hybrid shares its limit
// through rate_limiting.redis with every gateway using that server.
//
// Client connections, with nginx-like bounds so that the memory a client
// can hold is bounded (server section, read at start): a request line and
// header over max_header_bytes (32 KiB, nginx's large_client_header_buffers
// 4 8k) get 431 and a malformed one 400, and neither reaches the upstream;
// connections past max_connections (4096 open) or max_connections_per_ip
// (256 per address, IPv6 per /64; trusted_proxies exempt) are answered
// 503 and closed unserved, counted in
// slidelimit_gateway_connections_refused_total{reason}. 300 connections
// from one address each holding an unfinished header add about 3 MB (512
// kB headers: 431 at 32 KiB) to 13 MB (30 kB headers, held) of heap,
// where Go's defaults let them take 200 MB.
//
// Proxying, with nginx's defaults: upstream dial and response-header
// timeouts (60 s each) answer 504, other upstream failures 502; a response
// body that stalls for read_timeout_ms (60 s between two reads) is cut. A
// request body over max_body_bytes (1 MiB) gets 413, one that stalls for
// client_body_timeout_ms (60 s between two reads) 408, and with
// request_buffering (on) the body is read whole (memory up to
// body_memory_bytes, then a temporary file) before the upstream is
// contacted, so a slow client holds no upstream connection; a client that
// stops reading the response is cut after client_send_timeout_ms (60 s
// between two writes). Request headers named with "_" (a CGI or WSGI
// upstream reads X_Real_IP as X-Real-IP) or with characters other than
// letters, digits and "-" are dropped. A request whose path holds a
// control character or NUL once decoded (%00, %09, %0d%0a, %7f) gets 400:
// servers cut or strip the path there and would route it where no rule
// looked.
//
// Forwarding claims are passed on only from trusted_proxies (X-Forwarded-For
// and Forwarded with this hop appended); from any other peer every one of
// them is dropped, also when spelled with "_" for "-", and the gateway
// sets X-Forwarded-For, X-Forwarded-Proto, X-Forwarded-Host and Forwarded
// to what it saw. The headers dropped: client address: X-Forwarded-For,
// Forwarded, X-Real-IP, Forwarded-For, X-Forwarded,
// X-Original-Forwarded-For, True-Client-IP, X-Client-IP, Client-IP,
// X-Cluster-Client-IP, CF-Connecting-IP, CF-Connecting-IPv6,
// Fastly-Client-IP, X-Originating-IP, X-Remote-IP, X-Remote-Addr,
// X-ProxyUser-Ip, X-Envoy-External-Address, X-AppEngine-User-IP,
// X-Azure-ClientIP, X-Azure-SocketIP; scheme, host, port, prefix and the
// proxy: X-Forwarded-Proto, X-Forwarded-Host, X-Forwarded-Port,
// X-Forwarded-Prefix, X-Forwarded-Server, X-Forwarded-Ssl,
// X-Forwarded-Scheme, X-Forwarded-Protocol, X-Forwarded-Uri,
// X-Forwarded-Path, X-Forwarded-By, X-Forwarded-Client-Cert,
// X-Original-Host, X-Host, X-Url-Scheme, X-Scheme, Front-End-Https,
// X-ARR-SSL, CF-Visitor; path overrides: X-Original-URL, X-Rewrite-URL
// (the rate-limit rules match their path too, so from a trusted proxy
// they count). IPv6 zones never go out.
//
// Observability: with -pprof, the loopback admin listener serves package
// pprof's endpoints and Prometheus /metrics (per-rule decisions by
// outcome, backend errors, decision latency, tracked keys and key-table
// overflow; upstream errors; reloads; requests in flight); a reload drops
// the series of rules it removed. Logs are JSON (log/slog) on stderr,
// denials sampled, backend failures at most one line per rule per 10 s.
// Prometheus is imported here only, never by engine or httplimit.
package main
