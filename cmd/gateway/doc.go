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
// requests in flight never see a reload's limiters, proxy or timeouts.
// Limiter state (and Redis clients, and the key budget) is kept for every
// rule whose name, key source and policy are unchanged (the same
// fingerprint: an ip or route_ip rule is untouched by a new key_header or
// key_budget). An in-memory rule whose only change is max_requests (up to
// its limiter's max_limit) or burst keeps its limiter and counts too: the
// limiter takes the new numbers (engine SetLimit and SetBurst, through the
// running middleware, so its headers follow) just before the swap, and
// every decision from then on, in either configuration, is made under
// them; a build that fails afterwards puts the old numbers back. A rule's
// identity across reloads is its name (with its key source and its
// algorithm and window), not what it matches: a renamed rule starts
// afresh, and a rule that keeps its name keeps its counts even when its
// path_prefix, method or tier changes (swap two rules' path_prefix under
// the same names and each path gets the other's counts; rename to start
// afresh). A redis or hybrid rule keeps its counts while its algorithm,
// window, max_requests and burst stay the same (its Redis key names carry
// them); a change of any of them starts it afresh and logs "rule rebuilt
// on reload", as it does for an in-memory rule rebuilt. State is
// released when the last
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
// 4 8k) or with more than max_header_fields lines (100, Apache's
// LimitRequestFields; net/textproto keeps each line as a map entry, so
// 32 KiB of tiny lines held 500 kB) get 431 and a malformed one 400, and
// neither reaches the upstream. Header lines are counted as net/http
// reads them, before it parses them; a request with a chunked body is
// served and its connection then closed (only the body reader knows where
// such a body ends). Connections past max_connections_per_ip (256 per
// address, IPv6 per /64) are answered 503 and closed unserved. Peers in
// trusted_proxies have no per-address bound and a pool of their own,
// max_trusted_connections (4096), beside everyone else's max_connections
// (4096), so direct clients cannot lock the proxies out. A connection
// that finds its pool full takes the place of the pool's connection that
// has been sending its request the longest without the gateway working
// on it (idle in keep-alive, still sending its header, or still sending
// the body the gateway buffers before it contacts the upstream), which is
// closed and counted in slidelimit_gateway_connections_evicted_total{pool};
// only a pool whose every connection is being served (the upstream has
// its request, its response is going out, or it was upgraded) answers
// 503, counted in slidelimit_gateway_connections_refused_total{reason}.
// The trade-off: connections that send nothing, or trickle a header or a
// body, can no longer hold a pool for read_header_timeout_ms (60 s) or
// client_body_timeout_ms (60 s a byte), but under such a flood a
// legitimate client slow over its request, or idle in keep-alive, loses
// its connection to a newcomer (nginx too closes idle keep-alive
// connections when it runs out); a request the upstream has is never cut.
// What still holds a slot is a request being served: a slow upstream, or
// a client slow to read its response (client_send_timeout_ms between two
// writes); the rate limits bound how many such requests a client starts.
// 300 connections
// from one address each holding an unfinished header add about 3 MB
// (512 kB headers: 431 at 32 KiB) to 13 MB (30 kB headers, held) of heap,
// 256 holding 4000 tiny header lines each about 8 MB (431 at the 101st
// line; 127 MB without max_header_fields), where Go's defaults let them
// take 200 MB.
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
// control character or NUL once decoded (%00, %09, %0d%0a, %7f), or is
// not UTF-8 once decoded (an overlong %c0%af, which old decoders read as
// "/"), gets 400: servers cut, strip or reinterpret the path there and
// would route it where no rule looked. Protocol upgrades pass only to the
// protocols in proxy.upgrades (websocket by default): an upgraded
// connection is a tunnel no rule sees into, and "h2c" would carry any
// number of HTTP/2 requests past every limit to a lenient upstream. Any
// other Upgrade (and HTTP2-Settings, always) is removed, so the request
// is proxied as a plain one, and an upstream that switches protocols
// anyway gets 502. Under upstream_headers: ours the upstream's own
// rate-limit headers and trailers (RateLimit*, X-RateLimit-*,
// X-Rate-Limit-*) never reach the client: limited responses carry the
// gateway's, exempt and unmatched ones none.
//
// Forwarding claims are passed on only from trusted_proxies (X-Forwarded-For
// and Forwarded with this hop appended; every other header as the proxy
// sent it, X-Real-IP included, while the rate-limit key walks
// forwarded_header); from any other peer every one of them is dropped,
// also when spelled with "_" for "-", and the gateway sets
// X-Forwarded-For, X-Forwarded-Proto, X-Forwarded-Host and Forwarded to
// what it saw. The headers dropped: client address: X-Forwarded-For,
// Forwarded, X-Real-IP, Forwarded-For, X-Forwarded,
// X-Original-Forwarded-For, True-Client-IP, X-Client-IP, Client-IP,
// X-Cluster-Client-IP, CF-Connecting-IP, CF-Connecting-IPv6,
// Fastly-Client-IP, X-Originating-IP, X-Remote-IP, X-Remote-Addr,
// X-ProxyUser-Ip, X-Envoy-External-Address, X-AppEngine-User-IP,
// X-Azure-ClientIP, X-Azure-SocketIP, Proxy-Client-IP,
// WL-Proxy-Client-IP, X-ARR-ClientIP, Remote-Addr,
// X-Original-Remote-Addr, X-Real-Client-IP, Fly-Client-IP,
// DO-Connecting-IP, X-NF-Client-Connection-IP, X-Vercel-Forwarded-For,
// Ali-CDN-Real-IP, X-AppEngine-Remote-Addr, CloudFront-Viewer-Address,
// X-Client-Port, X-Real-Port; scheme, host, port, prefix and the proxy:
// X-Forwarded-Proto, X-Forwarded-Host, X-Forwarded-Port,
// X-Forwarded-Prefix, X-Forwarded-Server, X-Forwarded-Ssl,
// X-Forwarded-Scheme, X-Forwarded-Protocol, X-Forwarded-Uri,
// X-Forwarded-Path, X-Forwarded-By, X-Forwarded-Client-Cert,
// X-Forwarded-Hostname, X-Original-Host, X-Host, X-Real-Host,
// X-HTTP-Host-Override, X-Url-Scheme, X-Scheme, Front-End-Https,
// X-ARR-SSL, CF-Visitor, CloudFront-Forwarded-Proto, Forwarded-Proto,
// Forwarded-Host, X-Envoy-Internal, Via (a client's Via names proxies it
// never went through; the gateway adds none); path overrides:
// X-Original-URL, X-Rewrite-URL, X-Original-URI, X-Envoy-Original-Path
// (the rate-limit rules match the first two too, so from a trusted proxy
// they count). Beyond the list, any header whose name, in lower case and
// with "_" as "-", holds "forwarded", "client-ip", "clientip",
// "real-ip", "remote-addr", "remote-ip", "connecting-ip", "original-url"
// or "original-uri" is dropped, so a vendor's next variant is covered.
// IPv6 zones never go out.
//
// Restarts: with rate_limiting.state_file the in-memory rules' counts
// survive a restart. The file is restored before the listener serves,
// written every state_interval_ms and, at SIGTERM, once more after the
// listener stopped and in-flight requests finished, so the last snapshot
// is exact; a SIGKILL loses the decisions since the last snapshot began.
// Writes are atomic (temporary file, fsync, rename, mode 0600: the file
// holds the key-hash keys). A file that does not restore whole is renamed
// aside, never overwritten, and its unrestored rules start empty.
//
// Observability: with -pprof, the loopback admin listener serves package
// pprof's endpoints and Prometheus /metrics (per-rule decisions by
// outcome, backend errors, decision latency, tracked keys and key-table
// overflow; Redis and hybrid rules' store series from promlimit, evictions
// included; upstream errors; reloads; requests in flight; connections
// refused and evicted; decisions per rule and cohort, enforced or shadow;
// snapshots of the state file; the overload watcher's readings, state and
// shed requests); a reload drops the series of rules it removed. alerts.yml
// beside this file holds Prometheus alert rules on those series (checked
// by promtool in make test), dashboard.json a Grafana dashboard.
//
// Overload: the overload section samples the gateway's own health (live
// heap against its budget, GC pause p99, requests in flight, key tables)
// and, past its thresholds with hysteresis, enters a protective state in
// which the rules and tiers listed as sheddable answer 429 or 503 with
// Retry-After while the others keep their limits. Logs are JSON (log/slog) on stderr,
// denials sampled, backend failures at most one line per rule per 10 s.
// The rate-limiting series come from package promlimit's Collector
// (namespace slidelimit_gateway), the proxy's and the listener's from the
// gateway itself. The gateway is a module of its own, so that Prometheus
// and the YAML decoder are required by it and promlimit only, never by the
// library's module: engine and httplimit import neither.
package main
