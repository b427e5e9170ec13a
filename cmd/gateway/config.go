package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"reflect"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/httplimit"
	"github.com/slidelimit/slidelimit/redisstore"
)

// errConfig is wrapped by every configuration error.
var errConfig = errors.New("invalid gateway config")

// fileConfig is the YAML file. Field names follow the blueprint in the
// in-memory sliding-window design note (rate_limiting.sliding_window.*)
// plus what the middleware and the proxy need. Every integer field is an
// int64 or int: checkScalars rejects a YAML float or string for it, naming
// the field's path.
type fileConfig struct {
	RateLimiting rateLimiting `yaml:"rate_limiting"`
	Proxy        proxyFile    `yaml:"proxy"`
	Server       serverFile   `yaml:"server"`
	Log          logFile      `yaml:"log"`
	Overload     overloadFile `yaml:"overload"`
}

type rateLimiting struct {
	SlidingWindow   slidingWindow `yaml:"sliding_window"`
	Algorithm       string        `yaml:"algorithm"`
	Penalty         bool          `yaml:"penalty"`
	Key             string        `yaml:"key"`
	KeyHeader       string        `yaml:"key_header"`
	ForwardedHeader string        `yaml:"forwarded_header"`
	TrustedProxies  []string      `yaml:"trusted_proxies"`
	IPv4Prefix      int           `yaml:"ipv4_prefix"`
	IPv6Prefix      int           `yaml:"ipv6_prefix"`
	DryRun          bool          `yaml:"dry_run"`
	FailOpen        bool          `yaml:"fail_open"`
	TierHeader      string        `yaml:"tier_header"`
	// KeyBudget bounds the distinct unverified API keys one client IP may
	// introduce per window; past it the IP's requests are keyed by the IP.
	KeyBudget *keyBudgetFile `yaml:"key_budget"`
	// Stack applies every matching rule (stacked limits) instead of the
	// first; tiers and the default still apply only where they match.
	Stack  bool       `yaml:"stack"`
	Exempt exemptFile `yaml:"exempt"`
	// Preflight is the quota CORS preflights get per client IP, apart from
	// every rule's (they never spend a rule's quota); absent: the default
	// policy's limit and window.
	Preflight *preflightFile `yaml:"preflight"`
	// DenyCORSOrigins are the origins (or "*") a 429 of the gateway's own
	// is readable from in a browser: it then carries
	// Access-Control-Allow-Origin. Empty: none (see the README).
	DenyCORSOrigins []string     `yaml:"deny_cors_origins"`
	DenyBody        string       `yaml:"deny_body"`        // problem (application/problem+json, the default) or text
	UpstreamHeaders string       `yaml:"upstream_headers"` // ours (the default) or theirs
	Redis           *redisFile   `yaml:"redis"`
	Rules           []ruleConfig `yaml:"rules"`
	Tiers           []tierConfig `yaml:"tiers"`
	// StateFile keeps the in-memory rules' counts across restarts, written
	// every StateIntervalMs and at shutdown (see state.go).
	StateFile       string `yaml:"state_file"`
	StateIntervalMs int64  `yaml:"state_interval_ms"`
}

// slidingWindow is the default policy and the engine settings every
// limiter shares.
type slidingWindow struct {
	WindowSizeMs      int64  `yaml:"window_size_ms"`
	MaxRequests       int    `yaml:"max_requests"`
	CleanupIntervalMs int64  `yaml:"cleanup_interval_ms"`
	MemoryLimitMB     int64  `yaml:"memory_limit_mb"`
	EvictionPolicy    string `yaml:"eviction_policy"`
	// Burst and MaxLimit are the default policy's (see ruleConfig); rules
	// do not inherit them.
	Burst    *int `yaml:"burst"`
	MaxLimit *int `yaml:"max_limit"`
	// DryRun and EnforcePercent are the default policy's (see rollout).
	DryRun         *bool    `yaml:"dry_run"`
	EnforcePercent *float64 `yaml:"enforce_percent"`
}

type ruleConfig struct {
	Name         string `yaml:"name"`
	Method       string `yaml:"method"`
	PathPrefix   string `yaml:"path_prefix"`
	Tier         string `yaml:"tier"`
	WindowSizeMs *int64 `yaml:"window_size_ms"`
	MaxRequests  *int   `yaml:"max_requests"`
	Algorithm    string `yaml:"algorithm"`
	// Burst is GCRA's bucket (algorithm: gcra only): how many requests a
	// client with no recent traffic gets at once, then max_requests per
	// window. Absent: max_requests.
	Burst *int `yaml:"burst"`
	// MaxLimit is the headroom for reloads that change max_requests while
	// keeping the rule's counts (engine.Config.MaxLimit): a reload may set
	// max_requests up to it without starting the rule afresh. Absent:
	// max_requests for log and gcra, the algorithm's maximum for counter.
	MaxLimit *int `yaml:"max_limit"`
	// Penalty overrides rate_limiting.penalty for this rule. A hybrid
	// backend cannot count denied requests (they never reach Redis).
	Penalty *bool  `yaml:"penalty"`
	Key     string `yaml:"key"`
	// Backend is memory (the default: this process's engine), redis (every
	// gateway sharing the Redis server shares the limit; one round trip
	// per decision) or hybrid (leases of the shared limit, decided in
	// memory; see redisstore.Hybrid for the error bound).
	Backend        string `yaml:"backend"`
	SyncIntervalMs int64  `yaml:"sync_interval_ms"` // hybrid only
	MaxLease       int    `yaml:"max_lease"`        // hybrid only
	// DryRun and EnforcePercent: shadow and canary (see rollout).
	DryRun         *bool    `yaml:"dry_run"`
	EnforcePercent *float64 `yaml:"enforce_percent"`
}

type tierConfig struct {
	Name           string   `yaml:"name"`
	APIKeys        []string `yaml:"api_keys"`
	WindowSizeMs   *int64   `yaml:"window_size_ms"`
	MaxRequests    *int     `yaml:"max_requests"`
	Algorithm      string   `yaml:"algorithm"`
	DryRun         *bool    `yaml:"dry_run"`         // see rollout
	EnforcePercent *float64 `yaml:"enforce_percent"` // see rollout
}

type keyBudgetFile struct {
	NewKeys       int   `yaml:"new_keys"`  // new unverified keys per client IP per window, >= 1
	WindowMs      int64 `yaml:"window_ms"` // 0: the default window (rate_limiting.sliding_window.window_size_ms)
	MemoryLimitMB int64 `yaml:"memory_limit_mb"`
}

type preflightFile struct {
	WindowSizeMs *int64 `yaml:"window_size_ms"`
	MaxRequests  *int   `yaml:"max_requests"`
}

type exemptFile struct {
	Paths   []string `yaml:"paths"`
	CIDRs   []string `yaml:"cidrs"`
	Methods []string `yaml:"methods"`
}

// redisFile is the Redis server rules with backend redis or hybrid use.
type redisFile struct {
	Address   string `yaml:"address"`
	DB        int    `yaml:"db"`
	Prefix    string `yaml:"prefix"`
	TimeoutMs int64  `yaml:"timeout_ms"`
	// OnFailure is what a decision gets when Redis does not answer in
	// time: local (this gateway's share of the limit, in memory), open
	// or closed.
	OnFailure string `yaml:"on_failure"`
	Nodes     int    `yaml:"nodes"`
	// AllowEviction accepts a server whose maxmemory-policy can evict the
	// limiter's keys (redisstore.Config.AllowEviction). By default the
	// gateway refuses one: an evicted key grants its whole limit again.
	AllowEviction bool `yaml:"allow_eviction"`
}

// proxyFile is how the gateway talks to its upstream and what it accepts
// from clients. Zero means the nginx-like default.
type proxyFile struct {
	DialTimeoutMs           int64 `yaml:"dial_timeout_ms"`            // proxy_connect_timeout, 60 s
	ResponseHeaderTimeoutMs int64 `yaml:"response_header_timeout_ms"` // until the response header, 60 s
	ReadTimeoutMs           int64 `yaml:"read_timeout_ms"`            // proxy_read_timeout: between two reads of the response body, 60 s
	IdleConnTimeoutMs       int64 `yaml:"idle_conn_timeout_ms"`       // idle upstream connections, 90 s
	MaxBodyBytes            int64 `yaml:"max_body_bytes"`             // client_max_body_size, 1 MiB; -1: no limit
	ClientBodyTimeoutMs     int64 `yaml:"client_body_timeout_ms"`     // client_body_timeout: between two reads of the request body, 60 s
	ClientSendTimeoutMs     int64 `yaml:"client_send_timeout_ms"`     // send_timeout: between two writes of the response to the client, 60 s
	// RequestBuffering (proxy_request_buffering, default true) reads the
	// whole request body before the upstream is contacted, so a client
	// that trickles its body holds no upstream connection.
	RequestBuffering *bool `yaml:"request_buffering"`
	// BodyMemoryBytes is how much of a buffered body is kept in memory
	// (client_body_buffer_size); the rest goes to a temporary file. 16 KiB:
	// slow uploads cost memory per connection, the disk is cheaper.
	BodyMemoryBytes int64 `yaml:"body_memory_bytes"`
	// UnderscoresInHeaders passes request headers whose names contain "_"
	// (nginx's underscores_in_headers, default false: dropped, since
	// CGI/WSGI upstreams read X_Real_IP as X-Real-IP). Names with other
	// characters than letters, digits and "-" are always dropped (nginx's
	// ignore_invalid_headers).
	UnderscoresInHeaders bool `yaml:"underscores_in_headers"`
	// Upgrades lists the protocols a client may switch to through the
	// gateway (Upgrade header), compared ignoring case and version:
	// absent, [websocket]; [] none. An upgraded connection is a tunnel no
	// rule sees into: "h2c" would carry any number of HTTP/2 requests to
	// a lenient upstream past every limit. Any other Upgrade is removed
	// (with HTTP2-Settings, always), so the request is proxied as a plain
	// one, as nginx, Envoy and Traefik do by default.
	Upgrades *[]string `yaml:"upgrades"`
}

// serverFile is the client-facing listener. Read at start only: a reload
// that changes it is logged and applied at the next restart.
type serverFile struct {
	ReadHeaderTimeoutMs int64 `yaml:"read_header_timeout_ms"` // client_header_timeout, 60 s
	IdleTimeoutMs       int64 `yaml:"idle_timeout_ms"`        // keepalive_timeout, 75 s
	// MaxHeaderBytes bounds the request line and header of one request
	// (nginx's large_client_header_buffers 4 8k: 32 KiB); over it the
	// client gets 431 and the connection is closed. Go's own default
	// (1 MiB) let 1000 connections hold about 850 MB.
	MaxHeaderBytes int64 `yaml:"max_header_bytes"`
	// MaxConnections bounds the client connections open at once (nginx's
	// worker_connections), 4096; -1: none. Over it a connection is
	// answered 503 and closed.
	MaxConnections int `yaml:"max_connections"`
	// MaxConnectionsPerIP bounds the connections one client address (IPv6:
	// one /64) holds open (nginx's limit_conn), 256; -1: none. Peers in
	// trusted_proxies have no such bound.
	MaxConnectionsPerIP int `yaml:"max_connections_per_ip"`
	// MaxTrustedConnections bounds the connections of peers in
	// trusted_proxies, a pool of their own beside max_connections, 4096;
	// -1: none. Direct clients that fill max_connections cannot lock the
	// proxies out.
	MaxTrustedConnections int `yaml:"max_trusted_connections"`
	// MaxHeaderFields bounds the header lines of one request (Apache's
	// LimitRequestFields), 100; -1: none. Over it: 431. Each parsed line
	// costs about 120 bytes beyond its text, so max_header_bytes of tiny
	// lines held 500 kB per connection.
	MaxHeaderFields int `yaml:"max_header_fields"`
}

// logFile configures the structured log (log/slog, JSON on stderr).
type logFile struct {
	Access bool `yaml:"access"` // one line per request
	// DenySample logs one denial in DenySample (0: the default 1, every
	// denial; -1: none). Denials come in floods when a client misbehaves;
	// sampling keeps the log useful and cheap.
	DenySample int `yaml:"deny_sample"`
}

// minTierKeyLen is the shortest tier API key accepted.
const minTierKeyLen = 16

// maxMemoryLimitMB bounds memory_limit_mb so the byte count cannot
// overflow (1 TiB of key state is far beyond any sane gateway).
const maxMemoryLimitMB = 1 << 20

// eviction policies: the engine never evicts a key whose window still holds
// requests (that would forget a client's usage and let it burst again); it
// reclaims idle keys, in the background sweep and lazily when a shard is
// full. These names say what a new key gets when every tracked key is
// active.
var evictionPolicies = map[string]engine.OverflowPolicy{
	"":           engine.OverflowAllow,
	"idle-allow": engine.OverflowAllow,
	"idle-deny":  engine.OverflowDeny,
}

func fieldErr(field, format string, args ...any) error {
	return fmt.Errorf("%s: "+format+": %w", append([]any{field}, append(args, errConfig)...)...)
}

// config is a validated configuration: the middleware options (the
// rules still carry engine configs; build turns them into backends), one
// backend spec per rule, and the proxy, server and log settings.
type config struct {
	opts     httplimit.Options
	budget   *budgetSpec   // nil: no key budget
	backends []backendSpec // opts.Rules order, then opts.Default
	trusted  []netip.Prefix
	proxy    proxyConfig
	server   serverConfig
	log      logConfig
	state    stateConfig // read at start only
	overload overloadConfig
}

// backendSpec says how to build one rule's backend and when an existing
// one may be kept across a reload: fp covers everything that shapes the
// rule's state (name, key source, algorithm, window, engine and Redis
// settings, and a Redis backend's limit), so equal fingerprints mean the
// old state is still right. A memory backend's limit and burst are not in
// it: the kept limiter takes the new ones (SetLimit, SetBurst) and keeps
// its counts, unless the limit is above its MaxLimit (then it is rebuilt).
type backendSpec struct {
	field string // YAML path of the rule, for errors
	kind  string // memory, redis, hybrid
	rule  string // the rule's name
	fp    string
	// limit and burst are a memory backend's numbers, left out of fp: a
	// kept limiter is set to them (burst 0: the limit).
	limit, burst int
	redis        *redisConfig
	sync         time.Duration // hybrid
	lease        int           // hybrid
}

// budgetSpec is the key budget a configuration asks for. The key
// functions reach the KeyBudget through ref, which build fills with the
// current one or a new one; verified (the tier API keys) is read through
// the resource so a kept KeyBudget sees the new tiers.
type budgetSpec struct {
	cfg      httplimit.KeyBudgetConfig // Verified is set by build
	fp       string
	ref      *budgetRef
	verified map[string]string
}

type budgetRef struct{ kb *httplimit.KeyBudget }

func (b *budgetRef) key(r *http.Request) (string, error) { return b.kb.Key(r) }

type redisConfig struct {
	addr          string
	db            int
	prefix        string
	timeout       time.Duration
	onFailure     redisstore.FailPolicy
	nodes         int
	allowEviction bool
}

type proxyConfig struct {
	dialTimeout, responseHeaderTimeout, readTimeout, idleConnTimeout time.Duration
	maxBody                                                          int64 // < 0: unlimited
	clientBodyTimeout, clientSendTimeout                             time.Duration
	buffering                                                        bool
	bodyMemory                                                       int64
	underscores                                                      bool
	upgrades                                                         []string // lower case
}

type serverConfig struct {
	readHeaderTimeout, idleTimeout           time.Duration
	maxHeaderBytes                           int64
	maxConns, maxConnsPerIP, maxTrustedConns int // < 0: no bound
	maxHeaderFields                          int // < 0: no bound
}

func (s serverConfig) connBounds() connBounds {
	return connBounds{total: s.maxConns, trusted: s.maxTrustedConns, perIP: s.maxConnsPerIP, fields: s.maxHeaderFields}
}

type logConfig struct {
	access     bool
	denySample int // 0: no denial is logged
}

// nginx-like defaults.
const (
	defaultDialTimeout           = 60 * time.Second
	defaultResponseHeaderTimeout = 60 * time.Second
	defaultReadTimeout           = 60 * time.Second
	defaultIdleConnTimeout       = 90 * time.Second
	defaultMaxBody               = 1 << 20
	defaultClientBodyTimeout     = 60 * time.Second
	defaultClientSendTimeout     = 60 * time.Second
	defaultBodyMemory            = 16 << 10 // nginx's client_body_buffer_size on 64-bit
	defaultReadHeaderTimeout     = 60 * time.Second
	defaultIdleTimeout           = 75 * time.Second
	defaultMaxHeaderBytes        = 32 << 10 // large_client_header_buffers 4 8k
	defaultMaxConns              = 4096
	defaultMaxConnsPerIP         = 256
	defaultMaxTrustedConns       = 4096
	defaultMaxHeaderFields       = 100 // Apache's LimitRequestFields
	maxMaxHeaderFields           = 1 << 16
)

// Bounds of server.max_header_bytes: above Go's read slack (4 KiB, see
// start) plus a request line, and at most Go's default.
const (
	minMaxHeaderBytes = 8 << 10
	maxMaxHeaderBytes = 1 << 20
)

// maxMs bounds every *_ms field so that its time.Duration cannot overflow
// and matches the engine's longest window.
var maxMs = int64(engine.MaxWindow / time.Millisecond)

// loadConfig reads, decodes and validates path.
func loadConfig(path string) (*config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading config: %w", err)
	}
	c, err := parseConfig(b)
	if err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	return c, nil
}

// parseConfig decodes one YAML document strictly: an unknown field is an
// error naming it and its line, a value of the wrong YAML type (2.9 for an
// integer) an error naming its path.
func parseConfig(b []byte) (*config, error) {
	var root yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&root); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("empty file: %w", errConfig)
		}
		return nil, fmt.Errorf("%w: %w", err, errConfig)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("more than one YAML document: %w", errConfig)
	}
	if err := checkScalars(&root, reflect.TypeFor[fileConfig](), ""); err != nil {
		return nil, err
	}
	dec = yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	var fc fileConfig
	if err := dec.Decode(&fc); err != nil {
		return nil, fmt.Errorf("%w: %w", err, errConfig)
	}
	c := &config{}
	var err error
	if c.proxy, err = fc.Proxy.config(); err != nil {
		return nil, err
	}
	if c.server, err = fc.Server.config(); err != nil {
		return nil, err
	}
	if c.log, err = fc.Log.config(); err != nil {
		return nil, err
	}
	if err := fc.RateLimiting.fill(c); err != nil {
		return nil, err
	}
	if c.overload, err = fc.Overload.config(c, fc.RateLimiting.DenyCORSOrigins); err != nil {
		return nil, err
	}
	return c, nil
}

// msField converts a *_ms field: 0 gives def, otherwise 1..maxMs.
func msField(field string, v int64, def time.Duration) (time.Duration, error) {
	if v == 0 {
		return def, nil
	}
	if v < 0 || v > maxMs {
		return 0, fieldErr(field, "must be in [1, %d] ms (0: the default %v), got %d", maxMs, def, v)
	}
	return time.Duration(v) * time.Millisecond, nil
}

func (p proxyFile) config() (proxyConfig, error) {
	var c proxyConfig
	var err error
	if c.dialTimeout, err = msField("proxy.dial_timeout_ms", p.DialTimeoutMs, defaultDialTimeout); err != nil {
		return c, err
	}
	if c.responseHeaderTimeout, err = msField("proxy.response_header_timeout_ms", p.ResponseHeaderTimeoutMs, defaultResponseHeaderTimeout); err != nil {
		return c, err
	}
	if c.readTimeout, err = msField("proxy.read_timeout_ms", p.ReadTimeoutMs, defaultReadTimeout); err != nil {
		return c, err
	}
	if c.idleConnTimeout, err = msField("proxy.idle_conn_timeout_ms", p.IdleConnTimeoutMs, defaultIdleConnTimeout); err != nil {
		return c, err
	}
	if c.clientBodyTimeout, err = msField("proxy.client_body_timeout_ms", p.ClientBodyTimeoutMs, defaultClientBodyTimeout); err != nil {
		return c, err
	}
	if c.clientSendTimeout, err = msField("proxy.client_send_timeout_ms", p.ClientSendTimeoutMs, defaultClientSendTimeout); err != nil {
		return c, err
	}
	c.buffering = p.RequestBuffering == nil || *p.RequestBuffering
	c.underscores = p.UnderscoresInHeaders
	c.upgrades = []string{"websocket"}
	if p.Upgrades != nil {
		c.upgrades = nil
		for i, u := range *p.Upgrades {
			if !isToken(u) {
				return c, fieldErr(fmt.Sprintf("proxy.upgrades[%d]", i), "%q is not a protocol name (a token, no version)", u)
			}
			c.upgrades = append(c.upgrades, strings.ToLower(u))
		}
	}
	switch {
	case p.BodyMemoryBytes == 0:
		c.bodyMemory = defaultBodyMemory
	case p.BodyMemoryBytes < 0 || p.BodyMemoryBytes > 64<<20:
		return c, fieldErr("proxy.body_memory_bytes", "must be in [1, %d] (0: the default %d), got %d", 64<<20, defaultBodyMemory, p.BodyMemoryBytes)
	default:
		c.bodyMemory = p.BodyMemoryBytes
	}
	switch {
	case p.MaxBodyBytes == 0:
		c.maxBody = defaultMaxBody
	case p.MaxBodyBytes == -1:
		c.maxBody = -1
	case p.MaxBodyBytes < 0:
		return c, fieldErr("proxy.max_body_bytes", "must be > 0, or -1 for no limit (0: the default %d), got %d", defaultMaxBody, p.MaxBodyBytes)
	default:
		c.maxBody = p.MaxBodyBytes
	}
	return c, nil
}

func (s serverFile) config() (serverConfig, error) {
	var c serverConfig
	var err error
	if c.readHeaderTimeout, err = msField("server.read_header_timeout_ms", s.ReadHeaderTimeoutMs, defaultReadHeaderTimeout); err != nil {
		return c, err
	}
	if c.idleTimeout, err = msField("server.idle_timeout_ms", s.IdleTimeoutMs, defaultIdleTimeout); err != nil {
		return c, err
	}
	switch {
	case s.MaxHeaderBytes == 0:
		c.maxHeaderBytes = defaultMaxHeaderBytes
	case s.MaxHeaderBytes < minMaxHeaderBytes || s.MaxHeaderBytes > maxMaxHeaderBytes:
		return c, fieldErr("server.max_header_bytes", "must be in [%d, %d] (0: the default %d), got %d",
			minMaxHeaderBytes, maxMaxHeaderBytes, defaultMaxHeaderBytes, s.MaxHeaderBytes)
	default:
		c.maxHeaderBytes = s.MaxHeaderBytes
	}
	if c.maxConns, err = connBound("server.max_connections", s.MaxConnections, defaultMaxConns); err != nil {
		return c, err
	}
	if c.maxConnsPerIP, err = connBound("server.max_connections_per_ip", s.MaxConnectionsPerIP, defaultMaxConnsPerIP); err != nil {
		return c, err
	}
	if c.maxTrustedConns, err = connBound("server.max_trusted_connections", s.MaxTrustedConnections, defaultMaxTrustedConns); err != nil {
		return c, err
	}
	switch v := s.MaxHeaderFields; {
	case v == 0:
		c.maxHeaderFields = defaultMaxHeaderFields
	case v == -1:
		c.maxHeaderFields = -1
	case v < 1 || v > maxMaxHeaderFields:
		return c, fieldErr("server.max_header_fields", "must be in [1, %d], or -1 for no bound (0: the default %d), got %d",
			maxMaxHeaderFields, defaultMaxHeaderFields, v)
	default:
		c.maxHeaderFields = v
	}
	return c, nil
}

// connBound converts a connection bound: 0 gives def, -1 no bound (-1),
// otherwise at least 1.
func connBound(field string, v, def int) (int, error) {
	switch {
	case v == 0:
		return def, nil
	case v == -1:
		return -1, nil
	case v < 0:
		return 0, fieldErr(field, "must be > 0, or -1 for no bound (0: the default %d), got %d", def, v)
	}
	return v, nil
}

func (l logFile) config() (logConfig, error) {
	c := logConfig{access: l.Access}
	switch {
	case l.DenySample == 0:
		c.denySample = 1
	case l.DenySample == -1:
		c.denySample = 0
	case l.DenySample < 0:
		return c, fieldErr("log.deny_sample", "must be >= 1 (log one denial in N), or -1 for none (0: every denial), got %d", l.DenySample)
	default:
		c.denySample = l.DenySample
	}
	return c, nil
}

var failPolicies = map[string]redisstore.FailPolicy{
	"": redisstore.FailLocal, "local": redisstore.FailLocal, "open": redisstore.FailOpen, "closed": redisstore.FailClosed,
}

func (r *redisFile) config() (*redisConfig, error) {
	const p = "rate_limiting.redis"
	if r == nil {
		return nil, nil
	}
	c := &redisConfig{addr: r.Address, db: r.DB, prefix: r.Prefix, nodes: r.Nodes, allowEviction: r.AllowEviction}
	if _, port, err := net.SplitHostPort(r.Address); err != nil || port == "" {
		return nil, fieldErr(p+".address", "%q is not host:port", r.Address)
	} else if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return nil, fieldErr(p+".address", "%q: the port must be a number in [1, 65535]", r.Address)
	}
	if r.DB < 0 || r.DB > 15 {
		return nil, fieldErr(p+".db", "must be in [0, 15], got %d", r.DB)
	}
	if strings.ContainsAny(r.Prefix, "{}") {
		return nil, fieldErr(p+".prefix", "%q must not contain '{' or '}' (they delimit the cluster hash tag)", r.Prefix)
	}
	var err error
	if c.timeout, err = msField(p+".timeout_ms", r.TimeoutMs, redisstore.DefaultTimeout); err != nil {
		return nil, err
	}
	var ok bool
	if c.onFailure, ok = failPolicies[r.OnFailure]; !ok {
		return nil, fieldErr(p+".on_failure", "%q is not one of local, open, closed", r.OnFailure)
	}
	if r.Nodes < 0 {
		return nil, fieldErr(p+".nodes", "must be >= 1 (0: 1), got %d", r.Nodes)
	}
	return c, nil
}

func (rl *rateLimiting) fill(c *config) error {
	const p = "rate_limiting"
	sw := rl.SlidingWindow
	const swp = p + ".sliding_window"
	if sw.WindowSizeMs <= 0 || sw.WindowSizeMs > maxMs {
		return fieldErr(swp+".window_size_ms", "must be in [1, %d] (%v), got %d", maxMs, engine.MaxWindow, sw.WindowSizeMs)
	}
	if sw.MaxRequests <= 0 {
		return fieldErr(swp+".max_requests", "must be > 0, got %d", sw.MaxRequests)
	}
	if sw.CleanupIntervalMs < 0 || sw.CleanupIntervalMs > maxMs {
		return fieldErr(swp+".cleanup_interval_ms", "must be in [0, %d] (0: the engine default %v), got %d", maxMs, engine.DefaultSweepInterval, sw.CleanupIntervalMs)
	}
	if sw.MemoryLimitMB < 0 || sw.MemoryLimitMB > maxMemoryLimitMB {
		return fieldErr(swp+".memory_limit_mb", "must be in [0, %d] (0: the engine default %d MB), got %d", maxMemoryLimitMB, engine.DefaultMaxMemory>>20, sw.MemoryLimitMB)
	}
	overflow, ok := evictionPolicies[sw.EvictionPolicy]
	if !ok {
		return fieldErr(swp+".eviction_policy",
			"%q is not supported: the engine never evicts a key that holds requests in its window (no LRU); it reclaims idle keys and then gives new keys idle-allow (admitted untracked) or idle-deny (refused)", sw.EvictionPolicy)
	}
	alg, err := parseAlgorithm(p+".algorithm", rl.Algorithm, engine.SlidingCounter)
	if err != nil {
		return err
	}
	base := engine.Config{
		Penalty:       rl.Penalty,
		MaxMemory:     sw.MemoryLimitMB << 20,
		SweepInterval: time.Duration(sw.CleanupIntervalMs) * time.Millisecond,
		Overflow:      overflow,
	}

	var trusted []netip.Prefix
	for i, s := range rl.TrustedProxies {
		pfx, err := parsePrefix(s)
		if err != nil {
			return fieldErr(fmt.Sprintf("%s.trusted_proxies[%d]", p, i), "%q is not an IP address or CIDR prefix", s)
		}
		trusted = append(trusted, pfx)
	}
	if rl.IPv4Prefix < 0 || rl.IPv4Prefix > 32 {
		return fieldErr(p+".ipv4_prefix", "must be in [1, 32] (0: 32), got %d", rl.IPv4Prefix)
	}
	if rl.IPv6Prefix < 0 || rl.IPv6Prefix > 128 {
		return fieldErr(p+".ipv6_prefix", "must be in [1, 128] (0: 64), got %d", rl.IPv6Prefix)
	}
	ipKey, err := httplimit.ClientIP(httplimit.IPConfig{
		TrustedProxies: trusted, Header: rl.ForwardedHeader,
		IPv4Prefix: rl.IPv4Prefix, IPv6Prefix: rl.IPv6Prefix,
	})
	if err != nil {
		return fieldErr(p+".forwarded_header", "%q is not one of X-Forwarded-For, Forwarded, X-Real-IP", rl.ForwardedHeader)
	}
	keyHeader := rl.KeyHeader
	if keyHeader == "" {
		keyHeader = "X-API-Key"
	}
	if !validHeaderName(keyHeader) {
		return fieldErr(p+".key_header", "%q is not a valid header name", keyHeader)
	}
	keys := keyFuncs{ip: ipKey, header: httplimit.Header(keyHeader),
		// What shapes the keys each source returns; a rule whose keys
		// change on reload starts from empty state, one whose keys keep
		// their meaning keeps it (an ip rule is untouched by a new
		// key_header or key_budget).
		ipSpec:     fmt.Sprintf("trusted=%v forwarded=%q v4=%d v6=%d", trusted, rl.ForwardedHeader, rl.IPv4Prefix, rl.IPv6Prefix),
		headerName: http.CanonicalHeaderKey(keyHeader),
	}
	c.trusted = trusted
	if kb := rl.KeyBudget; kb != nil {
		const f = p + ".key_budget"
		if kb.NewKeys < 1 || kb.NewKeys > engine.MaxLogLimit {
			return fieldErr(f+".new_keys", "must be in [1, %d], got %d", engine.MaxLogLimit, kb.NewKeys)
		}
		win, err := msField(f+".window_ms", kb.WindowMs, time.Duration(sw.WindowSizeMs)*time.Millisecond)
		if err != nil {
			return err
		}
		if kb.MemoryLimitMB < 0 || kb.MemoryLimitMB > maxMemoryLimitMB {
			return fieldErr(f+".memory_limit_mb", "must be in [0, %d] (0: 16 MB), got %d", maxMemoryLimitMB, kb.MemoryLimitMB)
		}
		c.budget = &budgetSpec{
			cfg: httplimit.KeyBudgetConfig{Key: keys.header, IP: ipKey, NewKeys: kb.NewKeys, Window: win, MaxMemory: kb.MemoryLimitMB << 20},
			ref: &budgetRef{},
		}
		c.budget.fp = fmt.Sprintf("key-budget %s new=%d window=%v mem=%d", keys.specFor("header"), kb.NewKeys, win, kb.MemoryLimitMB)
		keys.budget = c.budget.ref
	}
	redisCfg, err := rl.Redis.config()
	if err != nil {
		return err
	}
	defKey, err := keys.parse(p+".key", rl.Key)
	if err != nil {
		return err
	}

	opts := httplimit.Options{Key: defKey, DryRun: rl.DryRun, FailOpen: rl.FailOpen, FallbackKey: ipKey, MatchAll: rl.Stack}
	switch rl.DenyBody {
	case "", "problem":
		opts.OnDeny = httplimit.DenyProblem
	case "text":
		opts.OnDeny = httplimit.DenyText
	default:
		return fieldErr(p+".deny_body", "%q is not one of problem, text", rl.DenyBody)
	}
	switch rl.UpstreamHeaders {
	case "", "ours":
		opts.Upstream = httplimit.UpstreamOurs
	case "theirs":
		opts.Upstream = httplimit.UpstreamTheirs
	default:
		return fieldErr(p+".upstream_headers", "%q is not one of ours, theirs", rl.UpstreamHeaders)
	}
	ex := &opts.Exempt
	ex.IP = httplimit.IPConfig{TrustedProxies: trusted, Header: rl.ForwardedHeader}
	for i, path := range rl.Exempt.Paths {
		if !strings.HasPrefix(path, "/") {
			return fieldErr(fmt.Sprintf("%s.exempt.paths[%d]", p, i), "%q must start with /", path)
		}
		ex.Paths = append(ex.Paths, path)
	}
	for i, s := range rl.Exempt.CIDRs {
		pfx, err := parsePrefix(s)
		if err != nil {
			return fieldErr(fmt.Sprintf("%s.exempt.cidrs[%d]", p, i), "%q is not an IP address or CIDR prefix", s)
		}
		ex.CIDRs = append(ex.CIDRs, pfx)
	}
	for i, m := range rl.Exempt.Methods {
		if !validToken(strings.ToUpper(m)) {
			return fieldErr(fmt.Sprintf("%s.exempt.methods[%d]", p, i), "%q is not an HTTP method", m)
		}
		ex.Methods = append(ex.Methods, strings.ToUpper(m))
	}
	defKeyName := rl.Key
	memory := func(field, name, keyName string, ec engine.Config) backendSpec {
		// The limit and the burst are not in the fingerprint: a reload
		// that changes only them keeps the limiter and its counts and
		// calls SetLimit and SetBurst on it (gateway.backend).
		id := ec
		id.Limit, id.Burst = 0, 0
		return backendSpec{field: field, kind: "memory", rule: name, limit: ec.Limit, burst: ec.Burst,
			fp: fmt.Sprintf("memory name=%q %s engine=%+v", name, keys.specFor(keyName), id)}
	}
	names := map[string]string{}
	claim := func(field, name string) error {
		if prev, ok := names[name]; ok {
			return fieldErr(field, "%q is already the name of %s", name, prev)
		}
		names[name] = field
		return nil
	}
	engineFor := func(field string, win *int64, max *int, algName string, burst, maxLimit *int) (engine.Config, error) {
		c := base
		c.Algorithm, c.Window, c.Limit = alg, time.Duration(sw.WindowSizeMs)*time.Millisecond, sw.MaxRequests
		if algName != "" {
			a, err := parseAlgorithm(field+".algorithm", algName, alg)
			if err != nil {
				return c, err
			}
			c.Algorithm = a
		}
		if win != nil {
			if *win <= 0 || *win > maxMs {
				return c, fieldErr(field+".window_size_ms", "must be in [1, %d] (%v), got %d", maxMs, engine.MaxWindow, *win)
			}
			c.Window = time.Duration(*win) * time.Millisecond
		}
		if max != nil {
			if *max <= 0 {
				return c, fieldErr(field+".max_requests", "must be > 0, got %d", *max)
			}
			c.Limit = *max
		}
		limitField := field + ".max_requests"
		if max == nil {
			limitField = swp + ".max_requests"
		}
		if most := c.Algorithm.MaxLimit(); c.Limit > most {
			hint := ""
			if c.Algorithm == engine.SlidingLog {
				hint = " (use algorithm: counter or gcra)"
			}
			return c, fieldErr(limitField, "%d exceeds the %v algorithm's maximum %d%s", c.Limit, c.Algorithm, most, hint)
		}
		if burst != nil {
			if c.Algorithm != engine.GCRA {
				return c, fieldErr(field+".burst", "is for algorithm: gcra; the %v algorithm's burst is max_requests (leave burst out)", c.Algorithm)
			}
			if *burst < 1 || *burst > engine.MaxGCRALimit {
				return c, fieldErr(field+".burst", "must be in [1, %d], got %d", engine.MaxGCRALimit, *burst)
			}
			c.Burst = *burst
		}
		if maxLimit != nil {
			if most := c.Algorithm.MaxLimit(); *maxLimit < c.Limit || *maxLimit > most {
				return c, fieldErr(field+".max_limit", "must be in [max_requests %d, %d] for the %v algorithm, got %d", c.Limit, most, c.Algorithm, *maxLimit)
			}
			c.MaxLimit = *maxLimit
		}
		if c.Algorithm == engine.GCRA {
			// GCRA's clock ticks at Window/MaxLimit, rounded up to a ns: the
			// engine wants at least 200 ns, where rounding costs under 1 %.
			ml := c.Limit
			if c.MaxLimit != 0 {
				ml = c.MaxLimit
			}
			if c.Window/time.Duration(ml) < 200 {
				return c, fieldErr(field+".window_size_ms", "%v is shorter than 200 ns x %d (max_limit or max_requests): GCRA's emission interval must be at least 200 ns", c.Window, ml)
			}
		}
		return c, nil
	}

	for i, rc := range rl.Rules {
		f := fmt.Sprintf("%s.rules[%d]", p, i)
		if !validName(rc.Name) {
			return fieldErr(f+".name", "%q must be 1 to 64 characters of [A-Za-z0-9_.-]", rc.Name)
		}
		if err := claim(f+".name", rc.Name); err != nil {
			return err
		}
		if rc.PathPrefix != "" && !strings.HasPrefix(rc.PathPrefix, "/") {
			return fieldErr(f+".path_prefix", "%q must start with /", rc.PathPrefix)
		}
		method := strings.ToUpper(rc.Method)
		if rc.Method != "" && !validToken(method) {
			return fieldErr(f+".method", "%q is not an HTTP method", rc.Method)
		}
		ec, err := engineFor(f, rc.WindowSizeMs, rc.MaxRequests, rc.Algorithm, rc.Burst, rc.MaxLimit)
		if err != nil {
			return err
		}
		if rc.Penalty != nil {
			ec.Penalty = *rc.Penalty
		}
		if ec.Penalty && rc.Backend == "hybrid" {
			from := ""
			if rc.Penalty == nil {
				from = " (from rate_limiting.penalty)"
			}
			return fieldErr(f+".penalty", "true%s is not supported by backend: hybrid (its denials are decided in memory and never reach Redis): set penalty: false on this rule, or use backend: redis", from)
		}
		if ec.Algorithm == engine.GCRA && rc.Backend == "hybrid" {
			return fieldErr(f+".backend", "hybrid does not support algorithm: gcra (its leases cannot be returned to a GCRA bucket without exceeding the rate): use backend: redis or memory")
		}
		var key httplimit.KeyFunc
		keyName := defKeyName
		if rc.Key != "" {
			if key, err = keys.parse(f+".key", rc.Key); err != nil {
				return err
			}
			keyName = rc.Key
		}
		bs, err := ruleBackend(f, rc, keys.specFor(keyName), ec, redisCfg)
		if err != nil {
			return err
		}
		if bs.kind == "memory" {
			bs = memory(f, rc.Name, keyName, ec)
		}
		c.backends = append(c.backends, bs)
		ru := httplimit.Rule{
			Name: rc.Name, Method: method, PathPrefix: rc.PathPrefix, Tier: rc.Tier, Engine: ec, Key: key,
			// A hybrid's Decision.Remaining is its node's lease, not the
			// global quota's remaining.
			RemainingUnknown: bs.kind == "hybrid",
		}
		if err := rollout(f, rc.DryRun, rc.EnforcePercent, &ru); err != nil {
			return err
		}
		opts.Rules = append(opts.Rules, ru)
	}

	tierOf := map[string]string{} // API key -> tier name
	tiers := map[string]bool{}
	for i, tc := range rl.Tiers {
		f := fmt.Sprintf("%s.tiers[%d]", p, i)
		if !validName(tc.Name) {
			return fieldErr(f+".name", "%q must be 1 to 64 characters of [A-Za-z0-9_.-]", tc.Name)
		}
		if err := claim(f+".name", tc.Name); err != nil {
			return err
		}
		if len(tc.APIKeys) == 0 {
			return fieldErr(f+".api_keys", "must list at least one API key")
		}
		for j, k := range tc.APIKeys {
			if len(k) < minTierKeyLen {
				// A tier key is a bearer credential: whoever sends it gets
				// the tier's allowance, uncharged by the key budget. A short
				// one is guessable (and the example's old "pro-key-1" was
				// public).
				return fieldErr(fmt.Sprintf("%s.api_keys[%d]", f, j), "must be at least %d characters (a secret, e.g. openssl rand -hex 16), got %d", minTierKeyLen, len(k))
			}
			if prev, ok := tierOf[k]; ok {
				return fieldErr(fmt.Sprintf("%s.api_keys[%d]", f, j), "key already belongs to tier %q", prev)
			}
			tierOf[k] = tc.Name
		}
		ec, err := engineFor(f, tc.WindowSizeMs, tc.MaxRequests, tc.Algorithm, nil, nil)
		if err != nil {
			return err
		}
		tiers[tc.Name] = true
		// A tier is a rule that matches its tier on every route, tried
		// after the route rules: route limits (a login rule) bind every
		// tier, tier limits replace the default.
		tr := httplimit.Rule{Name: tc.Name, Tier: tc.Name, Engine: ec}
		if err := rollout(f, tc.DryRun, tc.EnforcePercent, &tr); err != nil {
			return err
		}
		opts.Rules = append(opts.Rules, tr)
		c.backends = append(c.backends, memory(f, tc.Name, defKeyName, ec))
	}
	for i, rc := range rl.Rules {
		if rc.Tier != "" && !tiers[rc.Tier] {
			return fieldErr(fmt.Sprintf("%s.rules[%d].tier", p, i), "%q is not defined in rate_limiting.tiers", rc.Tier)
		}
	}
	if c.budget != nil {
		// Tier API keys are known good: never charged to a budget.
		c.budget.verified = tierOf
	}
	if len(tierOf) > 0 {
		tierHeader := rl.TierHeader
		if tierHeader == "" {
			tierHeader = keyHeader
		}
		if !validHeaderName(tierHeader) {
			return fieldErr(p+".tier_header", "%q is not a valid header name", tierHeader)
		}
		ck := http.CanonicalHeaderKey(tierHeader)
		opts.Tier = func(r *http.Request) string {
			if v := r.Header[ck]; len(v) > 0 {
				return tierOf[v[0]]
			}
			return ""
		}
	} else if rl.TierHeader != "" {
		return fieldErr(p+".tier_header", "is set but rate_limiting.tiers is empty")
	}

	def, err := engineFor(swp, nil, nil, "", sw.Burst, sw.MaxLimit)
	if err != nil {
		return err
	}
	if err := claim(swp, "default"); err != nil {
		return err
	}
	opts.Default = &httplimit.Rule{Name: "default", Engine: def}
	if err := rollout(swp, sw.DryRun, sw.EnforcePercent, opts.Default); err != nil {
		return err
	}
	c.backends = append(c.backends, memory(swp, "default", defKeyName, def))

	pf := rl.Preflight
	if pf == nil {
		pf = &preflightFile{}
	}
	pre, err := engineFor(p+".preflight", pf.WindowSizeMs, pf.MaxRequests, "", nil, nil)
	if err != nil {
		return err
	}
	if err := claim(p+".preflight", "preflight"); err != nil {
		return err
	}
	// Preflights carry no credentials (no API key): keyed by client IP.
	opts.Preflight = &httplimit.Rule{Name: "preflight", Engine: pre, Key: ipKey}
	c.backends = append(c.backends, memory(p+".preflight", "preflight", "ip", pre))

	for i, o := range rl.DenyCORSOrigins {
		if !validOrigin(o) {
			return fieldErr(fmt.Sprintf("%s.deny_cors_origins[%d]", p, i), "%q is not an origin (scheme://host[:port], or *)", o)
		}
	}
	opts.OnDeny = corsDeny(opts.OnDeny, rl.DenyCORSOrigins)
	c.opts = opts
	if c.state, err = rl.stateConfig(); err != nil {
		return err
	}
	return nil
}

// ruleBackend validates a rule's backend fields.
func ruleBackend(f string, rc ruleConfig, keySpec string, ec engine.Config, redisCfg *redisConfig) (backendSpec, error) {
	bs := backendSpec{field: f, kind: rc.Backend, rule: rc.Name}
	switch rc.Backend {
	case "", "memory":
		bs.kind = "memory"
		if rc.SyncIntervalMs != 0 || rc.MaxLease != 0 {
			return bs, fieldErr(f+".backend", "sync_interval_ms and max_lease need backend: hybrid")
		}
		return bs, nil
	case "redis", "hybrid":
	default:
		return bs, fieldErr(f+".backend", "%q is not one of memory, redis, hybrid", rc.Backend)
	}
	if redisCfg == nil {
		return bs, fieldErr(f+".backend", "%s needs rate_limiting.redis.address", rc.Backend)
	}
	if rc.MaxLimit != nil {
		// Only an in-memory limiter changes its numbers while serving; a
		// Redis rule is rebuilt on reload, and its counts stay in Redis
		// under key names that carry its numbers: a change of limit or
		// burst starts it afresh.
		return bs, fieldErr(f+".max_limit", "is for backend: memory (a %s rule is rebuilt on reload; its counts stay in Redis only while its numbers do)", rc.Backend)
	}
	if ec.Window%time.Microsecond != 0 {
		return bs, fieldErr(f+".window_size_ms", "must be a whole number of microseconds for Redis")
	}
	bs.redis = redisCfg
	if rc.Backend == "redis" {
		if rc.SyncIntervalMs != 0 || rc.MaxLease != 0 {
			return bs, fieldErr(f+".backend", "sync_interval_ms and max_lease need backend: hybrid")
		}
	} else {
		var err error
		if bs.sync, err = msField(f+".sync_interval_ms", rc.SyncIntervalMs, redisstore.DefaultSyncInterval); err != nil {
			return bs, err
		}
		if 2*bs.sync >= ec.Window {
			return bs, fieldErr(f+".sync_interval_ms", "%v must be less than half the window %v", bs.sync, ec.Window)
		}
		if rc.MaxLease < 0 || rc.MaxLease > ec.Limit {
			return bs, fieldErr(f+".max_lease", "must be in [0, max_requests=%d] (0: automatic), got %d", ec.Limit, rc.MaxLease)
		}
		bs.lease = rc.MaxLease
	}
	bs.fp = fmt.Sprintf("%s name=%q %s alg=%v limit=%d burst=%d window=%v penalty=%v redis=%+v sync=%v lease=%d",
		bs.kind, rc.Name, keySpec, ec.Algorithm, ec.Limit, ec.Burst, ec.Window, ec.Penalty, *redisCfg, bs.sync, bs.lease)
	return bs, nil
}

type keyFuncs struct {
	ip, header httplimit.KeyFunc
	budget     *budgetRef
	ipSpec     string // the client IP's settings (trusted proxies, header, prefixes)
	headerName string // canonical key_header
}

// specFor is what shapes the keys the source named s returns, for the
// fingerprints that decide whether a rule keeps its state on reload: the
// IP settings for ip and route_ip; for header sources also the header and
// whether a key budget stands in front (its fallback keys live in another
// namespace than a key chain's). The budget's own numbers are not in it:
// they change which requests use their API key, not what a key means.
func (k keyFuncs) specFor(s string) string {
	switch s {
	case "", "ip":
		return "key=ip " + k.ipSpec
	case "route_ip":
		return "key=route_ip " + k.ipSpec
	}
	return fmt.Sprintf("key=%s %s header=%q budget=%v", s, k.ipSpec, k.headerName, k.budget != nil)
}

// parse returns the key source s names. With a key budget every
// header-keyed source goes through it: the header's key while the
// client's IP is within its budget of new keys, else the IP.
func (k keyFuncs) parse(field, s string) (httplimit.KeyFunc, error) {
	switch s {
	case "", "ip":
		return k.ip, nil
	case "header":
		if k.budget != nil {
			return k.budget.key, nil
		}
		return k.header, nil
	case "header_or_ip":
		if k.budget != nil {
			return k.budget.key, nil
		}
		return httplimit.NewKeyChain(k.header, k.ip)
	case "route_ip":
		return httplimit.RouteIP(k.ip), nil
	}
	return nil, fieldErr(field, "%q is not one of ip, header, header_or_ip, route_ip", s)
}

func parseAlgorithm(field, s string, def engine.Algorithm) (engine.Algorithm, error) {
	if s == "" {
		return def, nil
	}
	a, err := engine.ParseAlgorithm(s)
	if err != nil {
		names := make([]string, 0, 3)
		for _, a := range engine.Algorithms() {
			names = append(names, a.String())
		}
		return 0, fieldErr(field, "%q is not one of %s (or another spelling engine.ParseAlgorithm accepts: sliding_log, sliding_counter, token_bucket, ...)", s, strings.Join(names, ", "))
	}
	return a, nil
}

// parsePrefix accepts a CIDR prefix or a single address (as /32 or /128).
func parsePrefix(s string) (netip.Prefix, error) {
	if strings.Contains(s, "/") {
		return netip.ParsePrefix(s)
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, err
	}
	return netip.PrefixFrom(a, a.BitLen()), nil
}

func validName(s string) bool {
	if len(s) == 0 || len(s) > 64 {
		return false
	}
	for _, c := range []byte(s) {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '.' || c == '-') {
			return false
		}
	}
	return true
}

// validToken reports whether s is an RFC 9110 token (method and header
// names).
func validToken(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range []byte(s) {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return true
}

func validHeaderName(s string) bool { return validToken(s) }

// validOrigin reports whether o is "*" or a serialized origin:
// scheme://host[:port], nothing after.
func validOrigin(o string) bool {
	if o == "*" {
		return true
	}
	u, err := url.Parse(o)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != "" &&
		u.Path == "" && u.RawQuery == "" && u.Fragment == "" && u.User == nil && o == u.Scheme+"://"+u.Host
}

// corsDeny wraps deny so that a 429 the gateway answers itself is readable
// by a browser script from the listed origins: the request's Origin is
// echoed in Access-Control-Allow-Origin (with Vary: Origin and
// Allow-Credentials, since an app's requests often carry cookies), or
// "*" is sent for "*" (no credentials then). The body holds nothing but
// the client's own rate-limit state. Off by default: which origins may
// read the API's responses is the upstream's call, and a gateway that
// echoed any origin would widen it.
func corsDeny(deny func(http.ResponseWriter, *http.Request, httplimit.Denial), origins []string) func(http.ResponseWriter, *http.Request, httplimit.Denial) {
	if len(origins) == 0 {
		return deny
	}
	allowed := map[string]bool{}
	for _, o := range origins {
		allowed[o] = true
	}
	return func(w http.ResponseWriter, r *http.Request, d httplimit.Denial) {
		if o := r.Header.Get("Origin"); o != "" {
			h := w.Header()
			switch {
			case allowed[o]:
				h.Set("Access-Control-Allow-Origin", o)
				h.Set("Access-Control-Allow-Credentials", "true")
				h.Add("Vary", "Origin")
			case allowed["*"]:
				h.Set("Access-Control-Allow-Origin", "*")
			}
		}
		deny(w, r, d)
	}
}

// isToken reports whether s is an RFC 9110 token.
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return true
}
