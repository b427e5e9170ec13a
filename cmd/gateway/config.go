package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/httplimit"
)

// errConfig is wrapped by every configuration error.
var errConfig = errors.New("invalid gateway config")

// fileConfig is the YAML file. Field names follow the blueprint in the
// in-memory sliding-window design note (rate_limiting.sliding_window.*)
// plus what the middleware needs.
type fileConfig struct {
	RateLimiting rateLimiting `yaml:"rate_limiting"`
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
	Rules           []ruleConfig  `yaml:"rules"`
	Tiers           []tierConfig  `yaml:"tiers"`
}

// slidingWindow is the default policy and the engine settings every
// limiter shares.
type slidingWindow struct {
	WindowSizeMs      int64  `yaml:"window_size_ms"`
	MaxRequests       int    `yaml:"max_requests"`
	CleanupIntervalMs int64  `yaml:"cleanup_interval_ms"`
	MemoryLimitMB     int64  `yaml:"memory_limit_mb"`
	EvictionPolicy    string `yaml:"eviction_policy"`
}

type ruleConfig struct {
	Name         string `yaml:"name"`
	Method       string `yaml:"method"`
	PathPrefix   string `yaml:"path_prefix"`
	Tier         string `yaml:"tier"`
	WindowSizeMs *int64 `yaml:"window_size_ms"`
	MaxRequests  *int   `yaml:"max_requests"`
	Algorithm    string `yaml:"algorithm"`
	Key          string `yaml:"key"`
}

type tierConfig struct {
	Name         string   `yaml:"name"`
	APIKeys      []string `yaml:"api_keys"`
	WindowSizeMs *int64   `yaml:"window_size_ms"`
	MaxRequests  *int     `yaml:"max_requests"`
	Algorithm    string   `yaml:"algorithm"`
}

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

// loadConfig reads, decodes and validates path into middleware options.
func loadConfig(path string) (httplimit.Options, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return httplimit.Options{}, fmt.Errorf("reading config: %w", err)
	}
	opts, err := parseConfig(b)
	if err != nil {
		return httplimit.Options{}, fmt.Errorf("config %s: %w", path, err)
	}
	return opts, nil
}

// parseConfig decodes one YAML document strictly: an unknown field is an
// error naming it and its line.
func parseConfig(b []byte) (httplimit.Options, error) {
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	var fc fileConfig
	if err := dec.Decode(&fc); err != nil {
		if errors.Is(err, io.EOF) {
			return httplimit.Options{}, fmt.Errorf("empty file: %w", errConfig)
		}
		return httplimit.Options{}, fmt.Errorf("%w: %w", err, errConfig)
	}
	var extra any
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return httplimit.Options{}, fmt.Errorf("more than one YAML document: %w", errConfig)
	}
	return fc.RateLimiting.options()
}

func (rl *rateLimiting) options() (httplimit.Options, error) {
	const p = "rate_limiting"
	sw := rl.SlidingWindow
	const swp = p + ".sliding_window"
	if sw.WindowSizeMs <= 0 {
		return httplimit.Options{}, fieldErr(swp+".window_size_ms", "must be > 0, got %d", sw.WindowSizeMs)
	}
	if sw.MaxRequests <= 0 {
		return httplimit.Options{}, fieldErr(swp+".max_requests", "must be > 0, got %d", sw.MaxRequests)
	}
	if sw.CleanupIntervalMs < 0 {
		return httplimit.Options{}, fieldErr(swp+".cleanup_interval_ms", "must be >= 0 (0: the engine default %v), got %d", engine.DefaultSweepInterval, sw.CleanupIntervalMs)
	}
	if sw.MemoryLimitMB < 0 || sw.MemoryLimitMB > maxMemoryLimitMB {
		return httplimit.Options{}, fieldErr(swp+".memory_limit_mb", "must be in [0, %d] (0: the engine default %d MB), got %d", maxMemoryLimitMB, engine.DefaultMaxMemory>>20, sw.MemoryLimitMB)
	}
	overflow, ok := evictionPolicies[sw.EvictionPolicy]
	if !ok {
		return httplimit.Options{}, fieldErr(swp+".eviction_policy",
			"%q is not supported: the engine never evicts a key that holds requests in its window (no LRU); it reclaims idle keys and then gives new keys idle-allow (admitted untracked) or idle-deny (refused)", sw.EvictionPolicy)
	}
	alg, err := parseAlgorithm(p+".algorithm", rl.Algorithm, engine.SlidingCounter)
	if err != nil {
		return httplimit.Options{}, err
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
			return httplimit.Options{}, fieldErr(fmt.Sprintf("%s.trusted_proxies[%d]", p, i), "%q is not an IP address or CIDR prefix", s)
		}
		trusted = append(trusted, pfx)
	}
	if rl.IPv4Prefix < 0 || rl.IPv4Prefix > 32 {
		return httplimit.Options{}, fieldErr(p+".ipv4_prefix", "must be in [1, 32] (0: 32), got %d", rl.IPv4Prefix)
	}
	if rl.IPv6Prefix < 0 || rl.IPv6Prefix > 128 {
		return httplimit.Options{}, fieldErr(p+".ipv6_prefix", "must be in [1, 128] (0: 64), got %d", rl.IPv6Prefix)
	}
	ipKey, err := httplimit.ClientIP(httplimit.IPConfig{
		TrustedProxies: trusted, Header: rl.ForwardedHeader,
		IPv4Prefix: rl.IPv4Prefix, IPv6Prefix: rl.IPv6Prefix,
	})
	if err != nil {
		return httplimit.Options{}, fieldErr(p+".forwarded_header", "%q is not one of X-Forwarded-For, Forwarded, X-Real-IP", rl.ForwardedHeader)
	}
	keyHeader := rl.KeyHeader
	if keyHeader == "" {
		keyHeader = "X-API-Key"
	}
	if !validHeaderName(keyHeader) {
		return httplimit.Options{}, fieldErr(p+".key_header", "%q is not a valid header name", keyHeader)
	}
	keys := keyFuncs{ip: ipKey, header: httplimit.Header(keyHeader)}
	defKey, err := keys.parse(p+".key", rl.Key)
	if err != nil {
		return httplimit.Options{}, err
	}

	opts := httplimit.Options{Key: defKey, DryRun: rl.DryRun, FailOpen: rl.FailOpen}
	names := map[string]string{}
	claim := func(field, name string) error {
		if prev, ok := names[name]; ok {
			return fieldErr(field, "%q is already the name of %s", name, prev)
		}
		names[name] = field
		return nil
	}
	engineFor := func(field string, win *int64, max *int, algName string) (engine.Config, error) {
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
			if *win <= 0 {
				return c, fieldErr(field+".window_size_ms", "must be > 0, got %d", *win)
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
		if c.Algorithm == engine.SlidingLog && c.Limit > engine.MaxLogLimit {
			return c, fieldErr(limitField, "%d exceeds the log algorithm's maximum %d (use algorithm: counter)", c.Limit, engine.MaxLogLimit)
		}
		if c.Algorithm == engine.SlidingCounter && c.Limit > engine.MaxCounterLimit {
			return c, fieldErr(limitField, "%d exceeds the counter algorithm's maximum %d", c.Limit, engine.MaxCounterLimit)
		}
		return c, nil
	}

	for i, rc := range rl.Rules {
		f := fmt.Sprintf("%s.rules[%d]", p, i)
		if !validName(rc.Name) {
			return httplimit.Options{}, fieldErr(f+".name", "%q must be 1 to 64 characters of [A-Za-z0-9_.-]", rc.Name)
		}
		if err := claim(f+".name", rc.Name); err != nil {
			return httplimit.Options{}, err
		}
		if rc.PathPrefix != "" && !strings.HasPrefix(rc.PathPrefix, "/") {
			return httplimit.Options{}, fieldErr(f+".path_prefix", "%q must start with /", rc.PathPrefix)
		}
		method := strings.ToUpper(rc.Method)
		if rc.Method != "" && !validToken(method) {
			return httplimit.Options{}, fieldErr(f+".method", "%q is not an HTTP method", rc.Method)
		}
		ec, err := engineFor(f, rc.WindowSizeMs, rc.MaxRequests, rc.Algorithm)
		if err != nil {
			return httplimit.Options{}, err
		}
		var key httplimit.KeyFunc
		if rc.Key != "" {
			if key, err = keys.parse(f+".key", rc.Key); err != nil {
				return httplimit.Options{}, err
			}
		}
		opts.Rules = append(opts.Rules, httplimit.Rule{
			Name: rc.Name, Method: method, PathPrefix: rc.PathPrefix, Tier: rc.Tier, Engine: ec, Key: key,
		})
	}

	tierOf := map[string]string{} // API key -> tier name
	tiers := map[string]bool{}
	for i, tc := range rl.Tiers {
		f := fmt.Sprintf("%s.tiers[%d]", p, i)
		if !validName(tc.Name) {
			return httplimit.Options{}, fieldErr(f+".name", "%q must be 1 to 64 characters of [A-Za-z0-9_.-]", tc.Name)
		}
		if err := claim(f+".name", tc.Name); err != nil {
			return httplimit.Options{}, err
		}
		if len(tc.APIKeys) == 0 {
			return httplimit.Options{}, fieldErr(f+".api_keys", "must list at least one API key")
		}
		for j, k := range tc.APIKeys {
			if k == "" {
				return httplimit.Options{}, fieldErr(fmt.Sprintf("%s.api_keys[%d]", f, j), "must not be empty")
			}
			if prev, ok := tierOf[k]; ok {
				return httplimit.Options{}, fieldErr(fmt.Sprintf("%s.api_keys[%d]", f, j), "key already belongs to tier %q", prev)
			}
			tierOf[k] = tc.Name
		}
		ec, err := engineFor(f, tc.WindowSizeMs, tc.MaxRequests, tc.Algorithm)
		if err != nil {
			return httplimit.Options{}, err
		}
		tiers[tc.Name] = true
		// A tier is a rule that matches its tier on every route, tried
		// after the route rules: route limits (a login rule) bind every
		// tier, tier limits replace the default.
		opts.Rules = append(opts.Rules, httplimit.Rule{Name: tc.Name, Tier: tc.Name, Engine: ec})
	}
	for i, rc := range rl.Rules {
		if rc.Tier != "" && !tiers[rc.Tier] {
			return httplimit.Options{}, fieldErr(fmt.Sprintf("%s.rules[%d].tier", p, i), "%q is not defined in rate_limiting.tiers", rc.Tier)
		}
	}
	if len(tierOf) > 0 {
		tierHeader := rl.TierHeader
		if tierHeader == "" {
			tierHeader = keyHeader
		}
		if !validHeaderName(tierHeader) {
			return httplimit.Options{}, fieldErr(p+".tier_header", "%q is not a valid header name", tierHeader)
		}
		ck := http.CanonicalHeaderKey(tierHeader)
		opts.Tier = func(r *http.Request) string {
			if v := r.Header[ck]; len(v) > 0 {
				return tierOf[v[0]]
			}
			return ""
		}
	} else if rl.TierHeader != "" {
		return httplimit.Options{}, fieldErr(p+".tier_header", "is set but rate_limiting.tiers is empty")
	}

	def, err := engineFor(swp, nil, nil, "")
	if err != nil {
		return httplimit.Options{}, err
	}
	if err := claim(swp, "default"); err != nil {
		return httplimit.Options{}, err
	}
	opts.Default = &httplimit.Rule{Name: "default", Engine: def}
	return opts, nil
}

type keyFuncs struct{ ip, header httplimit.KeyFunc }

func (k keyFuncs) parse(field, s string) (httplimit.KeyFunc, error) {
	switch s {
	case "", "ip":
		return k.ip, nil
	case "header":
		return k.header, nil
	case "route_ip":
		return httplimit.RouteIP(k.ip), nil
	}
	return nil, fieldErr(field, "%q is not one of ip, header, route_ip", s)
}

func parseAlgorithm(field, s string, def engine.Algorithm) (engine.Algorithm, error) {
	if s == "" {
		return def, nil
	}
	a, err := engine.ParseAlgorithm(s)
	if err != nil {
		return 0, fieldErr(field, "%q is not one of log, sliding_log, counter, sliding_counter", s)
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
