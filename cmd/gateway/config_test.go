package main

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/slidelimit/slidelimit/engine"
)

// tierKey is a tier API key long enough to be accepted.
const tierKey = "0123456789abcdef0123"

const minimal = `
rate_limiting:
  sliding_window:
    window_size_ms: 1000
    max_requests: 10
`

func TestExampleConfigLoads(t *testing.T) {
	c, err := loadConfig("gateway.example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	opts := c.opts
	if len(opts.Rules) != 1 || opts.Rules[0].Name != "login" || opts.Default == nil || opts.Preflight == nil {
		t.Fatalf("rules %+v default %+v preflight %+v", opts.Rules, opts.Default, opts.Preflight)
	}
	login := opts.Rules[0]
	if login.Method != "POST" || login.PathPrefix != "/login" || login.Engine.Algorithm != engine.SlidingLog ||
		login.Engine.Limit != 5 || login.Engine.Window != time.Minute || login.Key == nil {
		t.Errorf("login rule %+v", login)
	}
	if p := opts.Preflight.Engine; p.Limit != 100 || p.Window != time.Second || opts.Preflight.Key == nil {
		t.Errorf("preflight rule %+v", opts.Preflight)
	}
	d := opts.Default.Engine
	if d.Limit != 100 || d.Window != time.Second || d.SweepInterval != 10*time.Second || d.MaxMemory != 64<<20 || d.Overflow != engine.OverflowAllow {
		t.Errorf("default engine config %+v", d)
	}
	if opts.Tier != nil || c.budget == nil || len(c.budget.verified) != 0 {
		t.Error("the example ships tier keys (anyone who read them had the tier)")
	}
}

func TestConfigErrorsNameTheField(t *testing.T) {
	for _, tc := range []struct {
		name, yaml, want string
	}{
		{"unknown top field", minimal + "extra: 1\n", "extra: unknown field (line 6); the config file's top level takes rate_limiting, proxy, server, log"},
		{"unknown nested field", strings.Replace(minimal, "max_requests: 10", "max_requests: 10\n    max_request: 3", 1), "rate_limiting.sliding_window.max_request: unknown field (line 6); rate_limiting.sliding_window takes window_size_ms, max_requests,"},
		{"typo in rule", minimal + "  rules:\n    - name: a\n      path_prefx: /a\n", "rate_limiting.rules[0].path_prefx: unknown field (line 8)"},
		{"empty file", "", "empty file"},
		{"two documents", minimal + "---\n" + minimal, "more than one YAML document"},
		{"wrong type", strings.Replace(minimal, "max_requests: 10", "max_requests: ten", 1), `rate_limiting.sliding_window.max_requests: must be an integer, got str "ten" (line 5)`},
		{"limit 0", strings.Replace(minimal, "max_requests: 10", "max_requests: 0", 1), "rate_limiting.sliding_window.max_requests: must be > 0, got 0"},
		{"limit missing", "rate_limiting:\n  sliding_window:\n    window_size_ms: 1000\n", "rate_limiting.sliding_window.max_requests: must be > 0, got 0"},
		{"negative window", strings.Replace(minimal, "window_size_ms: 1000", "window_size_ms: -5", 1), "rate_limiting.sliding_window.window_size_ms: must be in [1, 31622400000] (8784h0m0s), got -5"},
		{"negative cleanup", minimal + "    cleanup_interval_ms: -1\n", "rate_limiting.sliding_window.cleanup_interval_ms: must be in [0, 31622400000]"},
		{"negative memory", minimal + "    memory_limit_mb: -1\n", "rate_limiting.sliding_window.memory_limit_mb: must be in [0, 1048576]"},
		{"lru eviction", minimal + "    eviction_policy: lru\n", `rate_limiting.sliding_window.eviction_policy: "lru" is not supported`},
		{"unknown algorithm", minimal + "  algorithm: leaky_bucket\n", `rate_limiting.algorithm: "leaky_bucket" is not one of`},
		{"log limit too big", strings.Replace(minimal, "max_requests: 10", "max_requests: 70000", 1) + "  algorithm: log\n", "rate_limiting.sliding_window.max_requests: 70000 exceeds the log algorithm's maximum 65535"},
		{"unknown key", minimal + "  key: cookie\n", `rate_limiting.key: "cookie" is not one of ip, header, header_or_ip, route_ip`},
		{"bad key header", minimal + "  key_header: \"X API\"\n", `rate_limiting.key_header: "X API" is not a valid header name`},
		{"bad CIDR", minimal + "  trusted_proxies: [10.0.0.0/8, 10.0.0.0/33]\n", `rate_limiting.trusted_proxies[1]: "10.0.0.0/33" is not an IP address or CIDR prefix`},
		{"bad forwarded header", minimal + "  forwarded_header: X-Client-IP\n", `rate_limiting.forwarded_header: "X-Client-IP"`},
		{"ipv6 prefix", minimal + "  ipv6_prefix: 129\n", "rate_limiting.ipv6_prefix: must be in [1, 128]"},
		{"ipv4 prefix", minimal + "  ipv4_prefix: -1\n", "rate_limiting.ipv4_prefix: must be in [1, 32]"},
		{"rule without name", minimal + "  rules:\n    - path_prefix: /a\n", `rate_limiting.rules[0].name: "" must be`},
		{"rule bad name", minimal + "  rules:\n    - name: \"a b\"\n", `rate_limiting.rules[0].name: "a b" must be`},
		{"duplicate names", minimal + "  rules:\n    - name: a\n    - name: a\n", `rate_limiting.rules[1].name: "a" is already the name of rate_limiting.rules[0].name`},
		{"rule named default", minimal + "  rules:\n    - name: default\n", `"default" is already the name of rate_limiting.rules[0].name`},
		{"relative prefix", minimal + "  rules:\n    - name: a\n      path_prefix: api\n", `rate_limiting.rules[0].path_prefix: "api" must start with /`},
		{"bad method", minimal + "  rules:\n    - name: a\n      method: \"GE T\"\n", `rate_limiting.rules[0].method: "GE T" is not an HTTP method`},
		{"rule limit 0", minimal + "  rules:\n    - name: a\n      max_requests: 0\n", "rate_limiting.rules[0].max_requests: must be > 0, got 0"},
		{"rule negative window", minimal + "  rules:\n    - name: a\n      window_size_ms: -1\n", "rate_limiting.rules[0].window_size_ms: must be in [1, 31622400000] (8784h0m0s), got -1"},
		{"rule algorithm", minimal + "  rules:\n    - name: a\n      algorithm: fixed\n", `rate_limiting.rules[0].algorithm: "fixed" is not one of`},
		{"unknown algorithm lists the engine's", minimal + "  algorithm: leaky\n", `"leaky" is not one of log, counter, gcra`},
		{"burst without gcra", minimal + "  rules:\n    - name: a\n      burst: 5\n", "rate_limiting.rules[0].burst: is for algorithm: gcra; the counter algorithm's burst is max_requests"},
		{"default burst without gcra", strings.Replace(minimal, "max_requests: 10", "max_requests: 10\n    burst: 3", 1), "rate_limiting.sliding_window.burst: is for algorithm: gcra"},
		{"burst zero", minimal + "  rules:\n    - name: a\n      algorithm: gcra\n      burst: 0\n", "rate_limiting.rules[0].burst: must be in [1, 1073741823], got 0"},
		{"max_limit below max_requests", minimal + "  rules:\n    - name: a\n      max_limit: 9\n", "rate_limiting.rules[0].max_limit: must be in [max_requests 10, 1048575] for the counter algorithm, got 9"},
		{"max_limit above the log's", minimal + "  rules:\n    - name: a\n      algorithm: log\n      max_limit: 70000\n", "rate_limiting.rules[0].max_limit: must be in [max_requests 10, 65535] for the log algorithm, got 70000"},
		{"penalty on a hybrid rule", minimal + "  redis:\n    address: 127.0.0.1:6379\n  rules:\n    - name: a\n      backend: hybrid\n      penalty: true\n", "rate_limiting.rules[0].penalty: true is not supported by backend: hybrid"},
		{"global penalty on a hybrid rule", minimal + "  penalty: true\n  redis:\n    address: 127.0.0.1:6379\n  rules:\n    - name: a\n      backend: hybrid\n", "rate_limiting.rules[0].penalty: true (from rate_limiting.penalty) is not supported by backend: hybrid"},
		{"gcra on a hybrid rule", minimal + "  redis:\n    address: 127.0.0.1:6379\n  rules:\n    - name: a\n      algorithm: gcra\n      backend: hybrid\n", "rate_limiting.rules[0].backend: hybrid does not support algorithm: gcra"},
		{"allow_eviction not a bool", minimal + "  redis:\n    address: 127.0.0.1:6379\n    allow_eviction: 1\n", "rate_limiting.redis.allow_eviction: must be true or false"},
		{"max_limit on a redis rule", minimal + "  redis:\n    address: 127.0.0.1:6379\n  rules:\n    - name: a\n      backend: redis\n      max_limit: 20\n", "rate_limiting.rules[0].max_limit: is for backend: memory"},
		{"gcra interval under 200 ns", minimal + "  rules:\n    - name: a\n      algorithm: gcra\n      window_size_ms: 1000\n      max_requests: 10\n      max_limit: 5000001\n", "rate_limiting.rules[0].window_size_ms: 1s is shorter than 200 ns x 5000001"},
		{"gcra limit too big", minimal + "  rules:\n    - name: a\n      algorithm: gcra\n      max_requests: 1073741824\n", "rate_limiting.rules[0].max_requests: 1073741824 exceeds the gcra algorithm's maximum 1073741823"},
		{"rule key", minimal + "  rules:\n    - name: a\n      key: jwt\n", `rate_limiting.rules[0].key: "jwt" is not one of`},
		{"rule undefined tier", minimal + "  rules:\n    - name: a\n      tier: gold\n", `rate_limiting.rules[0].tier: "gold" is not defined`},
		{"tier without keys", minimal + "  tiers:\n    - name: pro\n", "rate_limiting.tiers[0].api_keys: must list at least one API key"},
		{"tier empty key", minimal + "  tiers:\n    - name: pro\n      api_keys: [\"\"]\n", "rate_limiting.tiers[0].api_keys[0]: must be at least 16 characters"},
		{"guessable tier key", minimal + "  tiers:\n    - name: pro\n      api_keys: [pro-key-1]\n", "rate_limiting.tiers[0].api_keys[0]: must be at least 16 characters (a secret, e.g. openssl rand -hex 16), got 9"},
		{"key in two tiers", minimal + "  tiers:\n    - name: pro\n      api_keys: [" + tierKey + "]\n    - name: gold\n      api_keys: [" + tierKey + "]\n", `rate_limiting.tiers[1].api_keys[0]: key already belongs to tier "pro"`},
		{"tier limit 0", minimal + "  tiers:\n    - name: pro\n      api_keys: [" + tierKey + "]\n      max_requests: 0\n", "rate_limiting.tiers[0].max_requests: must be > 0, got 0"},
		{"tier name clash", minimal + "  rules:\n    - name: pro\n  tiers:\n    - name: pro\n      api_keys: [" + tierKey + "]\n", `rate_limiting.tiers[0].name: "pro" is already the name of rate_limiting.rules[0].name`},
		// No silent truncation, every error names the YAML path.
		{"fractional limit", strings.Replace(minimal, "max_requests: 10", "max_requests: 2.9", 1), `rate_limiting.sliding_window.max_requests: must be an integer, got float "2.9" (line 5)`},
		{"fractional window", strings.Replace(minimal, "window_size_ms: 1000", "window_size_ms: 2500.9", 1), `rate_limiting.sliding_window.window_size_ms: must be an integer, got float "2500.9" (line 4)`},
		{"exponent window", strings.Replace(minimal, "window_size_ms: 1000", "window_size_ms: 1e3", 1), `rate_limiting.sliding_window.window_size_ms: must be an integer, got float "1e3"`},
		{"quoted limit", strings.Replace(minimal, "max_requests: 10", `max_requests: "10"`, 1), `rate_limiting.sliding_window.max_requests: must be an integer, got str "10"`},
		{"fractional rule limit", minimal + "  rules:\n    - name: a\n      max_requests: 1.5\n", `rate_limiting.rules[0].max_requests: must be an integer, got float "1.5"`},
		{"fractional tier window", minimal + "  tiers:\n    - name: pro\n      api_keys: [" + tierKey + "]\n      window_size_ms: 0.5\n", `rate_limiting.tiers[0].window_size_ms: must be an integer`},
		{"int overflow", strings.Replace(minimal, "max_requests: 10", "max_requests: 99999999999999999999", 1), "rate_limiting.sliding_window.max_requests: 99999999999999999999 does not fit a 64-bit integer"},
		{"limit over int32", strings.Replace(minimal, "max_requests: 10", "max_requests: 4294967296", 1), "rate_limiting.sliding_window.max_requests: 4294967296 is out of range"},
		{"overflowing window", strings.Replace(minimal, "window_size_ms: 1000", "window_size_ms: 9223372036854775807", 1), "rate_limiting.sliding_window.window_size_ms: must be in [1, 31622400000]"},
		{"overflowing rule window", minimal + "  rules:\n    - name: a\n      window_size_ms: 31622400001\n", "rate_limiting.rules[0].window_size_ms: must be in [1, 31622400000]"},
		{"bool as string", minimal + "  dry_run: \"yes\"\n", `rate_limiting.dry_run: must be true or false, got str "yes"`},
		{"list for scalar", minimal + "  key: [ip]\n", "rate_limiting.key: must be a string, got a list"},
		{"scalar for list", minimal + "  trusted_proxies: 10.0.0.0/8\n", "rate_limiting.trusted_proxies: must be a list"},
		{"alias", minimal + "  rules:\n    - &r\n      name: a\n    - *r\n", "rate_limiting.rules[1]: YAML aliases are not supported"},
		{"proxy dial", minimal + "proxy:\n  dial_timeout_ms: -1\n", "proxy.dial_timeout_ms: must be in [1, 31622400000] ms (0: the default 1m0s), got -1"},
		{"proxy header timeout", minimal + "proxy:\n  response_header_timeout_ms: 1.5\n", "proxy.response_header_timeout_ms: must be an integer"},
		{"proxy body", minimal + "proxy:\n  max_body_bytes: -2\n", "proxy.max_body_bytes: must be > 0, or -1 for no limit"},
		{"proxy unknown", minimal + "proxy:\n  read_timeout: 5\n", "proxy.read_timeout: unknown field (line 7); proxy takes dial_timeout_ms,"},
		{"server idle", minimal + "server:\n  idle_timeout_ms: -3\n", "server.idle_timeout_ms: must be in [1, 31622400000]"},
		{"log sample", minimal + "log:\n  deny_sample: -2\n", "log.deny_sample: must be >= 1"},
		{"redis backend without redis", minimal + "  rules:\n    - name: a\n      backend: redis\n", "rate_limiting.rules[0].backend: redis needs rate_limiting.redis.address"},
		{"unknown backend", minimal + "  rules:\n    - name: a\n      backend: etcd\n", `rate_limiting.rules[0].backend: "etcd" is not one of memory, redis, hybrid`},
		{"redis address", minimal + "  redis:\n    address: localhost\n", `rate_limiting.redis.address: "localhost" is not host:port`},
		{"redis policy", minimal + "  redis:\n    address: 127.0.0.1:6379\n    on_failure: retry\n", `rate_limiting.redis.on_failure: "retry" is not one of local, open, closed`},
		{"redis db", minimal + "  redis:\n    address: 127.0.0.1:6379\n    db: 16\n", "rate_limiting.redis.db: must be in [0, 15], got 16"},
		{"hybrid sync", minimal + "  redis:\n    address: 127.0.0.1:6379\n  rules:\n    - name: a\n      backend: hybrid\n      sync_interval_ms: 500\n", "rate_limiting.rules[0].sync_interval_ms: 500ms must be less than half the window 1s"},
		{"hybrid lease", minimal + "  redis:\n    address: 127.0.0.1:6379\n  rules:\n    - name: a\n      backend: hybrid\n      max_lease: 11\n", "rate_limiting.rules[0].max_lease: must be in [0, max_requests=10]"},
		{"lease without hybrid", minimal + "  rules:\n    - name: a\n      max_lease: 3\n", "rate_limiting.rules[0].backend: sync_interval_ms and max_lease need backend: hybrid"},
		{"tier header without tiers", minimal + "  tier_header: X-Tier\n", "rate_limiting.tier_header: is set but rate_limiting.tiers is empty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parseConfig([]byte(tc.yaml))
			if err == nil {
				t.Fatalf("accepted, want error containing %q", tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q\ndoes not contain %q", err, tc.want)
			}
			if !errors.Is(err, errConfig) {
				t.Errorf("error %v does not wrap errConfig", err)
			}
		})
	}
}

func TestConfigAcceptsSingleAddressProxiesAndIdleDeny(t *testing.T) {
	c, err := parseConfig([]byte(minimal + "    eviction_policy: idle-deny\n  trusted_proxies: [192.0.2.1, \"2001:db8::/32\"]\n  rules:\n    - name: a\n      method: get\n"))
	if err != nil {
		t.Fatal(err)
	}
	opts := c.opts
	if opts.Default.Engine.Overflow != engine.OverflowDeny {
		t.Errorf("idle-deny gave Overflow %v", opts.Default.Engine.Overflow)
	}
	if opts.Rules[0].Method != "GET" {
		t.Errorf("method %q, want GET (upper-cased)", opts.Rules[0].Method)
	}
}

func TestFlagErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-upstream", "builtin"}, "-config is required"},
		{[]string{"-config", "x.yaml"}, "-upstream is required"},
		{[]string{"-config", "x.yaml", "-upstream", "builtin", "stray"}, `unexpected argument "stray"`},
		{[]string{"-config", "x.yaml", "-upstream", "builtin", "-shutdown-timeout", "0s"}, "-shutdown-timeout must be > 0"},
	} {
		var sink strings.Builder
		if _, err := parseFlags(tc.args, &sink); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("parseFlags(%q) = %v, want error containing %q", tc.args, err, tc.want)
		}
	}
	for _, s := range []string{"ftp://x", "http://", "::"} {
		if _, err := parseUpstream(s); err == nil {
			t.Errorf("parseUpstream(%q) accepted", s)
		}
	}
}

// TestMemoryTooSmallNamesTheYAMLField: the engine's own check of the
// memory bound (it depends on the shard count, so only building the
// limiter finds it) is reported as the YAML field, not as
// "Config.MaxMemory", and the failed load leaves nothing behind.
func TestMemoryTooSmallNamesTheYAMLField(t *testing.T) {
	c, err := parseConfig([]byte(`
rate_limiting:
  algorithm: log
  sliding_window:
    window_size_ms: 1000
    max_requests: 65535
    memory_limit_mb: 1
`))
	if err != nil {
		t.Fatal(err)
	}
	// The engine allocates key state as keys arrive, so 1 MB is too small
	// only for the table of many shards: 16 per core, 65536 on a machine
	// of 4096 cores. The test gives the rule that shard count.
	c.opts.Default.Engine.Shards = 1 << 16
	g := newGateway(nil, slog.New(slog.NewTextHandler(io.Discard, nil)), nil)
	g.metrics = newMetrics(func() float64 { return 0 }, g)
	err = g.load(c)
	if err == nil {
		g.close()
		t.Fatal("1 MB for a table of 65536 shards was accepted")
	}
	if !strings.HasPrefix(err.Error(), "rate_limiting.sliding_window.memory_limit_mb (used by rate_limiting.sliding_window)") || !errors.Is(err, errConfig) {
		t.Errorf("error %q does not name the YAML field first", err)
	}
	if len(g.resources) != 0 || g.cur.Load() != nil {
		t.Errorf("a failed load left %d resources, current %v", len(g.resources), g.cur.Load())
	}
}

// exampleConfig is the shipped example with the default policy's window
// and limit replaced, so tests can reach them.
func exampleConfig(t *testing.T, maxRequests, windowMs int) string {
	t.Helper()
	b, err := os.ReadFile("gateway.example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "max_requests: 100 ") || !strings.Contains(string(b), "window_size_ms: 1000 ") {
		t.Fatal("the example's default policy lines changed; update exampleConfig")
	}
	cfg := strings.Replace(string(b), "max_requests: 100 ", fmt.Sprintf("max_requests: %d ", maxRequests), 1)
	return strings.Replace(cfg, "window_size_ms: 1000 ", fmt.Sprintf("window_size_ms: %d ", windowMs), 1)
}

// TestExampleConfigHasNoUsableTierKeys: the example shipped tier keys
// (pro-key-1) that anyone who read the README could send; tier keys now
// must be secrets of 16 characters or more.
func TestExampleConfigHasNoUsableTierKeys(t *testing.T) {
	c, err := loadConfig("gateway.example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if c.opts.Tier != nil {
		t.Error("the example config defines tiers")
	}
	_, err = parseConfig([]byte(minimal + "  tiers:\n    - name: pro\n      api_keys: [pro-key-1]\n"))
	if err == nil || !strings.Contains(err.Error(), "rate_limiting.tiers[0].api_keys[0]: must be at least 16 characters") {
		t.Errorf("a guessable tier key: %v", err)
	}
}

// TestYAMLMergeOctalAndEmptyValuesRejected: merge keys bypassed the integer and
// alias checks, 0100 was read as 64, and an empty rule max_requests
// inherited the default.
func TestYAMLMergeOctalAndEmptyValuesRejected(t *testing.T) {
	for _, tc := range []struct{ name, yaml, want string }{
		{"merge float", "rate_limiting:\n  sliding_window:\n    <<: {window_size_ms: 1000.9, max_requests: 2.9}\n",
			"rate_limiting.sliding_window.<<: YAML merge keys are not supported (line 3)"},
		{"merge in rule", minimal + "  rules:\n    - name: login\n      <<: {max_requests: 5.9}\n", "rate_limiting.rules[0].<<: YAML merge keys are not supported"},
		{"merge alias", "rate_limiting:\n  sliding_window: &sw\n    window_size_ms: 1000\n    max_requests: 100\n  rules:\n    - name: login\n      <<: *sw\n",
			"rate_limiting.rules[0].<<: YAML merge keys are not supported (line 7)"},
		{"octal", "rate_limiting:\n  sliding_window: {window_size_ms: 1000, max_requests: 0100}\n",
			`rate_limiting.sliding_window.max_requests: must be a decimal integer, got "0100" (line 2)`},
		{"hex", "rate_limiting:\n  sliding_window: {window_size_ms: 0x3e8, max_requests: 10}\n", `rate_limiting.sliding_window.window_size_ms: must be a decimal integer, got "0x3e8"`},
		{"empty rule limit", minimal + "  rules:\n    - {name: login, path_prefix: /login, max_requests: , window_size_ms: 60000}\n",
			"rate_limiting.rules[0].max_requests: is empty (line 7): give it a value, or remove the line for the default"},
		{"explicit null", minimal + "proxy:\n  dial_timeout_ms: ~\n", "proxy.dial_timeout_ms: is empty"},
		{"quoted percentage", minimal + "  rules:\n    - {name: login, path_prefix: /login, enforce_percent: \"5\"}\n",
			`rate_limiting.rules[0].enforce_percent: must be a number, got str "5" (line 7)`},
		{"hex percentage", minimal + "  rules:\n    - {name: login, path_prefix: /login, enforce_percent: 0x10}\n",
			`rate_limiting.rules[0].enforce_percent: must be a decimal integer, got "0x10"`},
		{"nan percentage", minimal + "  rules:\n    - {name: login, path_prefix: /login, enforce_percent: .nan}\n",
			`rate_limiting.rules[0].enforce_percent: must be a finite decimal number, got ".nan"`},
	} {
		_, err := parseConfig([]byte(tc.yaml))
		if err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, errConfig) {
			t.Errorf("%s: %v\nwant %q", tc.name, err, tc.want)
		}
	}
	for _, ok := range []string{"max_requests: 1_000", "max_requests: 0", "max_requests: +7", "max_requests: 10\n    enforce_percent: 2.5", "max_requests: 10\n    enforce_percent: 5"} {
		_, err := parseConfig([]byte(strings.Replace(minimal, "max_requests: 10", ok, 1)))
		if err != nil && strings.Contains(err.Error(), "decimal") {
			t.Errorf("%s rejected as not decimal: %v", ok, err)
		}
	}
}

// TestConfigErrorsNameTheYAMLPath: each of these named a Go type, only a
// line, nothing, the wrong problem or a section instead of the field; a
// Redis address without a numeric port was accepted.
func TestConfigErrorsNameTheYAMLPath(t *testing.T) {
	for _, tc := range []struct{ name, yaml, want string }{
		{"unknown field", "rate_limiting:\n  sliding_window: {window_size_ms: 1000, max_requests: 100, max_request: 5}\n",
			"rate_limiting.sliding_window.max_request: unknown field (line 2)"},
		{"duplicate key", "rate_limiting:\n  sliding_window:\n    window_size_ms: 1000\n    max_requests: 100\n    max_requests: 1\n",
			"rate_limiting.sliding_window.max_requests: set twice (lines 4 and 5)"},
		{"list root", "- a\n- b\n", "the config file's top level: must be a mapping, got a list (line 1)"},
		{"tagged float", "rate_limiting:\n  sliding_window: {window_size_ms: !!float 1000, max_requests: 100}\n",
			`rate_limiting.sliding_window.window_size_ms: must be an integer, got float "1000" (line 2)`},
		{"tagged str", "rate_limiting:\n  sliding_window: {window_size_ms: 1000, max_requests: !!str 100}\n",
			`rate_limiting.sliding_window.max_requests: must be an integer, got str "100"`},
		{"key budget new keys", minimal + "  key: header\n  key_budget: {new_keys: 100000}\n", "rate_limiting.key_budget.new_keys: must be in [1, 65535], got 100000"},
		{"redis port", minimal + "  redis: {address: \"127.0.0.1:notaport\"}\n", `rate_limiting.redis.address: "127.0.0.1:notaport": the port must be a number in [1, 65535]`},
		{"redis port 0", minimal + "  redis: {address: \"127.0.0.1:0\"}\n", `rate_limiting.redis.address: "127.0.0.1:0": the port must be a number`},
	} {
		_, err := parseConfig([]byte(tc.yaml))
		if err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, errConfig) {
			t.Errorf("%s: %v\nwant %q", tc.name, err, tc.want)
		}
	}
}

// TestKeyBudgetMemoryTooSmallNamesItsField: the key budget's memory bound
// is checked only by building it (it depends on the shard count, and so
// on the machine's cores), and its error names its YAML field too. On a
// machine whose shard count fits in 1 MB the bound cannot be too small,
// and the test says so.
func TestKeyBudgetMemoryTooSmallNamesItsField(t *testing.T) {
	c, err := parseConfig([]byte(minimal + "  key: header\n  key_budget: {new_keys: 5, memory_limit_mb: 1}\n"))
	if err != nil {
		t.Fatal(err)
	}
	g := newGateway(nil, slog.New(slog.NewTextHandler(io.Discard, nil)), nil)
	g.metrics = newMetrics(func() float64 { return 0 }, g)
	if err := g.load(c); err == nil {
		g.close()
		t.Skip("1 MB is enough for this machine's shard count")
	} else if !strings.HasPrefix(err.Error(), "rate_limiting.key_budget.memory_limit_mb: ") || !errors.Is(err, errConfig) {
		t.Errorf("key budget memory error %q does not start with its field", err)
	}
}
