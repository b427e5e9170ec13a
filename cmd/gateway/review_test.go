package main

// Regression tests for the adversarial review of issue 11, each named after
// its finding (B: bypass, W: wrong behaviour, D: documentation). Tests about
// the process (signals, start-up) run the built binary.

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

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

// countingUpstream counts requests by upper-cased method and path, the way
// Flask and Rails route them.
type countingUpstream struct {
	mu   sync.Mutex
	hits map[string]int
	last http.Header
}

func newCountingUpstream(t *testing.T) (*countingUpstream, *httptest.Server) {
	c := &countingUpstream{hits: map[string]int{}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c.mu.Lock()
		c.hits[strings.ToUpper(r.Method)+" "+r.URL.Path]++
		c.last = r.Header.Clone()
		c.mu.Unlock()
	}))
	t.Cleanup(srv.Close)
	return c, srv
}

func (c *countingUpstream) count(k string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.hits[k]
}

// TestB1LowercaseMethodCannotEscapeLogin: the example promises 5 logins a
// minute per client IP; 20 "post /login" after 8 POSTs all reached an
// upstream that routes them as POST.
func TestB1LowercaseMethodCannotEscapeLogin(t *testing.T) {
	up, srv := newCountingUpstream(t)
	_, gw := newTestGateway(t, exampleConfig(t, 100, 1000), srv.URL)
	codes := ""
	for _, m := range []string{"POST", "POST", "POST", "post", "Post", "post", "pOST", "post"} {
		codes += fmt.Sprint(do(t, m, gw.URL+"/login", nil).StatusCode, " ")
	}
	if codes != "200 200 200 200 200 429 429 429 " {
		t.Errorf("login attempts: %s, want 5 passed then 429", codes)
	}
	if n := up.count("POST /login"); n != 5 {
		t.Errorf("the upstream's POST /login ran %d times, want 5", n)
	}
}

// TestB2PathVariantsCannotEscapeOrWinExemption runs the example: spellings
// that servlet, IIS, Express or Rails upstreams route to /login are
// limited by the login rule, and spellings that leave /healthz for them
// are not exempt.
func TestB2PathVariantsCannotEscapeOrWinExemption(t *testing.T) {
	_, srv := newCountingUpstream(t)
	_, gw := newTestGateway(t, exampleConfig(t, 1000, 1000), srv.URL)
	host := strings.TrimPrefix(gw.URL, "http://")
	raw := func(method, target string) *http.Response {
		t.Helper()
		c, err := net.Dial("tcp", host)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fmt.Fprintf(c, "%s %s HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n", method, target)
		res, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("%s %s: %v", method, target, err)
		}
		res.Body.Close()
		return res
	}
	for _, target := range []string{"/LOGIN", "/login;jsessionid=1", "/login.json", "/x/..;/login", `/x/..%5clogin`, "//login"} {
		if p := raw("POST", target).Header.Get("RateLimit-Policy"); !strings.Contains(p, `"login"`) {
			t.Errorf("POST %s: policy %q, want the login rule", target, p)
		}
	}
	for _, target := range []string{"/healthz/..;/admin", "/healthz/%2e%2e;/admin", `/healthz/..%5cadmin`, "/healthz/../admin"} {
		if raw("GET", target).Header.Get("RateLimit-Policy") == "" {
			t.Errorf("GET %s: exempt, want limited", target)
		}
	}
	if raw("GET", "/healthz/live").Header.Get("RateLimit-Policy") != "" {
		t.Error("GET /healthz/live: limited, want exempt")
	}
}

// TestB3ExampleConfigHasNoUsableTierKeys: the example shipped tier keys
// (pro-key-1) that anyone who read the README could send; tier keys now
// must be secrets of 16 characters or more.
func TestB3ExampleConfigHasNoUsableTierKeys(t *testing.T) {
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

// TestB4UnderscoreHeadersNeverReachTheUpstream: a CGI/WSGI upstream reads
// X_Real_IP as X-Real-IP; an untrusted client's underscore spellings must
// not pass (nginx drops them by default).
func TestB4UnderscoreHeadersNeverReachTheUpstream(t *testing.T) {
	up, srv := newCountingUpstream(t)
	claims := map[string]string{"X_Real_IP": "6.6.6.6", "X_Forwarded_For": "6.6.6.6", "X_Forwarded_Proto": "https", "X-Real-IP": "7.7.7.7",
		"X.Real.IP": "8.8.8.8"} // PHP folds "." too; nginx drops such names (ignore_invalid_headers)
	_, gw := newTestGateway(t, minimal, srv.URL)
	do(t, "GET", gw.URL+"/", claims)
	up.mu.Lock()
	h := up.last
	up.mu.Unlock()
	for k := range h {
		if strings.ContainsAny(k, "_.") {
			t.Errorf("upstream got %s: %q", k, h[k])
		}
	}
	if h.Get("X-Real-Ip") != "" || h.Get("X-Forwarded-For") != "127.0.0.1" {
		t.Errorf("X-Real-IP %q X-Forwarded-For %q", h.Get("X-Real-Ip"), h.Get("X-Forwarded-For"))
	}
	_, gw = newTestGateway(t, minimal+"proxy:\n  underscores_in_headers: true\n", srv.URL)
	do(t, "GET", gw.URL+"/", map[string]string{"X_Trace": "1"})
	up.mu.Lock()
	h = up.last
	up.mu.Unlock()
	if h.Get("X_trace") == "" {
		t.Errorf("underscores_in_headers: true dropped X_Trace: %v", h)
	}
}

// connCounter is an upstream that counts the connections it accepted.
func connCounter(t *testing.T, h http.Handler) (*atomic.Int64, *httptest.Server) {
	var n atomic.Int64
	srv := httptest.NewUnstartedServer(h)
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			n.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	return &n, srv
}

// TestB5SlowBodyHoldsNoUpstreamConnection: 20 clients trickling their
// bodies held 20 upstream connections. With request buffering (the
// default) the upstream is contacted only once a body is complete; a body
// that stalls past client_body_timeout_ms gets 408 and never reaches it.
func TestB5SlowBodyHoldsNoUpstreamConnection(t *testing.T) {
	var got atomic.Value
	conns, up := connCounter(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got.Store(fmt.Sprintf("%d %x", len(b), sha256.Sum256(b)))
	}))
	const bodyTimeout = 400 * time.Millisecond
	_, gw := newTestGateway(t, minimal+"proxy:\n  client_body_timeout_ms: 400\n  body_memory_bytes: 1024\n", up.URL)
	host := strings.TrimPrefix(gw.URL, "http://")

	// Five slow clients: headers, then one byte at a time, well within
	// the timeout between reads but far from done.
	var clients []net.Conn
	for range 5 {
		c, err := net.Dial("tcp", host)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fmt.Fprintf(c, "POST /up HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n")
		clients = append(clients, c)
	}
	for range 3 {
		for _, c := range clients {
			_, _ = c.Write([]byte("a"))
		}
		time.Sleep(bodyTimeout / 4)
	}
	if n := conns.Load(); n != 0 {
		t.Errorf("%d upstream connections opened for bodies still arriving, want 0", n)
	}
	// Now they stall: each gets 408 once client_body_timeout_ms passes
	// without a byte, and the upstream never sees them.
	start := time.Now()
	for _, c := range clients {
		_ = c.SetReadDeadline(time.Now().Add(failAfter))
		res, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		if res.StatusCode != http.StatusRequestTimeout {
			t.Errorf("stalled body: %d, want 408", res.StatusCode)
		}
	}
	if took := time.Since(start); took < bodyTimeout/2 {
		t.Errorf("408 after %v: the stall was not waited for", took)
	}
	if n := conns.Load(); n != 0 {
		t.Errorf("%d upstream connections after the stalled bodies, want 0", n)
	}

	// A body larger than body_memory_bytes goes through a temporary file
	// and arrives whole, and the file is gone afterwards.
	body := bytes.Repeat([]byte("0123456789abcdef"), 4096) // 64 KiB
	before := tempBodies(t)
	res, err := http.Post(gw.URL+"/up", "application/octet-stream", io.MultiReader(bytes.NewReader(body))) // chunked
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if want := fmt.Sprintf("%d %x", len(body), sha256.Sum256(body)); res.StatusCode != 200 || got.Load() != want {
		t.Errorf("spooled body: status %d, upstream got %v, want %s", res.StatusCode, got.Load(), want)
	}
	if after := tempBodies(t); after > before {
		t.Errorf("%d temporary body files left behind", after-before)
	}
}

func tempBodies(t *testing.T) int {
	m, err := filepath.Glob(filepath.Join(os.TempDir(), "gateway-body-*"))
	if err != nil {
		t.Fatal(err)
	}
	return len(m)
}

// TestB5StreamingBodyTimesOut: with request_buffering off the body is
// streamed to the upstream, and a stall still ends it with 408 instead of
// holding the upstream connection.
func TestB5StreamingBodyTimesOut(t *testing.T) {
	upstreamDone := make(chan error, 1)
	_, up := connCounter(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, err := io.ReadAll(r.Body)
		upstreamDone <- err
	}))
	g, gw := newTestGateway(t, minimal+"proxy:\n  client_body_timeout_ms: 300\n  request_buffering: false\n", up.URL)
	c, err := net.Dial("tcp", strings.TrimPrefix(gw.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "POST /up HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nabc")
	_ = c.SetReadDeadline(time.Now().Add(failAfter))
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.StatusCode != http.StatusRequestTimeout {
		t.Errorf("stalled streamed body: %d, want 408", res.StatusCode)
	}
	select {
	case err := <-upstreamDone:
		if err == nil {
			t.Error("the upstream read a complete body from a stalled client")
		}
	case <-time.After(failAfter):
		t.Error("the upstream is still reading the stalled body")
	}
	if got := testutilCounter(t, g.metrics, "slidelimit_gateway_upstream_errors_total", `kind="client_body_timeout"`); got != 1 {
		t.Errorf("client_body_timeout counter %v, want 1", got)
	}
}

// TestW1ReloadKeepsIPRuleState: a reload that changes only
// key_budget.new_keys, or only key_header, does not touch an ip-keyed
// rule: the login rule kept granting 5 fresh attempts per such reload.
func TestW1ReloadKeepsIPRuleState(t *testing.T) {
	cfg := exampleConfig(t, 100, 1000)
	g, gw := newTestGateway(t, cfg, okUpstream(t).URL)
	for i := 0; i < 5; i++ {
		do(t, "POST", gw.URL+"/login", nil)
	}
	for _, edit := range []struct{ from, to string }{
		{"new_keys: 5 ", "new_keys: 6 "},
		{"key_header: X-API-Key ", "key_header: X-Api-Token "},
		{"window_ms: 600000 ", "window_ms: 300000 "},
	} {
		next := strings.Replace(cfg, edit.from, edit.to, 1)
		if next == cfg {
			t.Fatalf("example config lacks %q", edit.from)
		}
		cfg = next
		c, err := parseConfig([]byte(cfg))
		if err != nil {
			t.Fatal(err)
		}
		if err := g.load(c); err != nil {
			t.Fatal(err)
		}
		if code := do(t, "POST", gw.URL+"/login", nil).StatusCode; code != 429 {
			t.Errorf("after a reload changing %q: login %d, want 429 (state kept)", edit.from, code)
		}
	}
	// A change that does change the ip keys (trusting a proxy) starts afresh.
	c, err := parseConfig([]byte(strings.Replace(cfg, "trusted_proxies: []", "trusted_proxies: [10.0.0.0/8]", 1)))
	if err != nil {
		t.Fatal(err)
	}
	if err := g.load(c); err != nil {
		t.Fatal(err)
	}
	if code := do(t, "POST", gw.URL+"/login", nil).StatusCode; code != 200 {
		t.Errorf("after changing trusted_proxies: login %d, want 200 (keys mean something else now)", code)
	}
}

// TestW2YAMLMergeOctalAndEmptyValues: merge keys bypassed the integer and
// alias checks, 0100 was read as 64, and an empty rule max_requests
// inherited the default.
func TestW2YAMLMergeOctalAndEmptyValues(t *testing.T) {
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
	} {
		_, err := parseConfig([]byte(tc.yaml))
		if err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, errConfig) {
			t.Errorf("%s: %v\nwant %q", tc.name, err, tc.want)
		}
	}
	for _, ok := range []string{"max_requests: 1_000", "max_requests: 0", "max_requests: +7"} {
		_, err := parseConfig([]byte(strings.Replace(minimal, "max_requests: 10", ok, 1)))
		if err != nil && strings.Contains(err.Error(), "decimal") {
			t.Errorf("%s rejected as not decimal: %v", ok, err)
		}
	}
}

// TestD1ConfigErrorsNameTheYAMLPath: each of these named a Go type, only a
// line, nothing, the wrong problem or a section instead of the field; a
// Redis address without a numeric port was accepted.
func TestD1ConfigErrorsNameTheYAMLPath(t *testing.T) {
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
	// The key budget's memory bound is checked only by building it (it
	// depends on the shard count): named by its field too.
	c, err := parseConfig([]byte(minimal + "  key: header\n  key_budget: {new_keys: 5, memory_limit_mb: 1}\n"))
	if err != nil {
		t.Fatal(err)
	}
	g := newGateway(nil, slog.New(slog.NewTextHandler(io.Discard, nil)), nil)
	g.metrics = newMetrics(func() float64 { return 0 }, g.currentEngines)
	if err := g.load(c); err == nil {
		g.close()
		t.Skip("1 MB is enough for this machine's shard count")
	} else if !strings.HasPrefix(err.Error(), "rate_limiting.key_budget.memory_limit_mb: ") || !errors.Is(err, errConfig) {
		t.Errorf("key budget memory error %q does not start with its field", err)
	}
}

// TestD3ZoneIDsNeverForwarded: an IPv6 zone names an interface of this
// host; it leaked into X-Forwarded-For and made Forwarded invalid RFC 7239.
func TestD3ZoneIDsNeverForwarded(t *testing.T) {
	in := httptest.NewRequest("GET", "http://gw/x", nil)
	in.RemoteAddr = "[fe80::99%lo]:4711"
	out := in.Clone(in.Context())
	forwardHeaders(out, in, nil)
	if got := out.Header.Get("X-Forwarded-For"); got != "fe80::99" {
		t.Errorf("X-Forwarded-For %q", got)
	}
	if got := out.Header.Get("Forwarded"); !strings.HasPrefix(got, `for="[fe80::99]";`) {
		t.Errorf("Forwarded %q", got)
	}
	// A trusted proxy on a link-local address is trusted with its zone.
	out = in.Clone(in.Context())
	in.Header.Set("X-Forwarded-For", "203.0.113.9")
	forwardHeaders(out, in, []netip.Prefix{netip.MustParsePrefix("fe80::/10")})
	if got := out.Header.Get("X-Forwarded-For"); got != "203.0.113.9, fe80::99" {
		t.Errorf("through a zoned trusted proxy: X-Forwarded-For %q", got)
	}
}

// TestW9StalledResponseBodyIsCut: the upstream sent its header and then
// stalled its body; the gateway waited as long as it liked. read_timeout_ms
// now bounds the wait between two reads.
func TestW9StalledResponseBodyIsCut(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "10")
		_, _ = io.WriteString(w, "part")
		_ = http.NewResponseController(w).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer up.Close()
	const readTimeout = 300 * time.Millisecond
	g, gw := newTestGateway(t, minimal+"proxy:\n  read_timeout_ms: 300\n", up.URL)
	start := time.Now()
	// The gateway cuts the connection: what it had buffered may or may not
	// have gone out first, but the body never completes.
	res, err := http.Get(gw.URL + "/stall")
	if err == nil {
		var b []byte
		b, err = io.ReadAll(res.Body)
		res.Body.Close()
		if err == nil {
			t.Errorf("stalled body arrived whole: %q", b)
		}
	}
	took := time.Since(start)
	if took < readTimeout || took > readTimeout+failAfter/4 {
		t.Errorf("cut after %v, want about %v", took, readTimeout)
	}
	if got := testutilCounter(t, g.metrics, "slidelimit_gateway_upstream_errors_total", `kind="read_timeout"`); got != 1 {
		t.Errorf("read_timeout counter %v, want 1", got)
	}
	// A slow but steady body is not cut: the timeout is between two reads
	// (here 1 s), not on the whole body (1.5 s, 250 ms apart).
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for i := 0; i < 6; i++ {
			_, _ = io.WriteString(w, "x")
			_ = http.NewResponseController(w).Flush()
			time.Sleep(250 * time.Millisecond)
		}
	}))
	defer slow.Close()
	_, gw2 := newTestGateway(t, minimal+"proxy:\n  read_timeout_ms: 1000\n", slow.URL)
	res, err = http.Get(gw2.URL + "/")
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(res.Body)
	res.Body.Close()
	if err != nil || string(b) != "xxxxxx" {
		t.Errorf("steady body: %q, %v", b, err)
	}
}

// TestW7SIGHUPCaughtBeforeHeavyInits: a SIGHUP in the first 20-50 ms
// killed the process (129): signal.Notify ran in main, after the
// initializers of Prometheus, protobuf, go-redis and yaml. Package hupsig
// now catches it from its own initialization; the Go runtime's init trace
// shows it runs before every heavy dependency. (Timing it would make the
// test depend on the machine's load; the order is what the fix controls.)
func TestW7SIGHUPCaughtBeforeHeavyInits(t *testing.T) {
	cmd := exec.Command(gatewayBinary(t), "-h")
	cmd.Env = append(os.Environ(), "GODEBUG=inittrace=1")
	out, _ := cmd.CombinedOutput() // -h exits 2 after the inits ran
	order := map[string]int{}
	n := 0
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) > 2 && f[0] == "init" {
			order[f[1]] = n
			n++
		}
	}
	hup, ok := order["github.com/slidelimit/slidelimit/cmd/gateway/internal/hupsig"]
	if !ok {
		t.Fatalf("hupsig not in the init trace:\n%s", out)
	}
	for _, heavy := range []string{
		"github.com/prometheus/client_golang/prometheus", "google.golang.org/protobuf/types/known/timestamppb",
		"github.com/redis/go-redis/v9", "go.yaml.in/yaml/v3", "net/http", "main",
	} {
		if i, ok := order[heavy]; ok && i < hup {
			t.Errorf("%s is initialized before hupsig (%d < %d)", heavy, i, hup)
		}
	}
}

// TestW7SIGHUPDuringStartDoesNotKill: a SIGHUP sent while the gateway is
// still starting (loading its config, before it listens) is caught and
// becomes a reload once it serves. The signal goes out as soon as the
// process has written its first line; the window before main is
// TestW7SIGHUPCaughtBeforeHeavyInits's.
func TestW7SIGHUPDuringStartDoesNotKill(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "gateway.yaml")
	writeFile(t, cfg, minimal)
	cmd := startCmd(t, "-config", cfg, "-listen", "127.0.0.1:0", "-upstream", "builtin", "-pprof", "127.0.0.1:0")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr syncBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill() }()
	sc := bufio.NewScanner(stdout)
	if !sc.Scan() { // "builtin upstream on ...": start-up is under way
		t.Fatalf("no output: %s", stderr.String())
	}
	_ = cmd.Process.Signal(syscall.SIGHUP)
	listening := false
	for sc.Scan() {
		if strings.Contains(sc.Text(), "listening on") {
			listening = true
			break
		}
	}
	if !listening {
		_ = cmd.Wait()
		t.Fatalf("the gateway did not survive a SIGHUP during start-up: %v\n%s", cmd.ProcessState, stderr.String())
	}
	deadline := time.Now().Add(failAfter)
	for !strings.Contains(stderr.String(), "configuration reloaded") {
		if time.Now().After(deadline) {
			t.Fatalf("the SIGHUP sent during start-up was not handled as a reload:\n%s", stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	go func() { _, _ = io.Copy(io.Discard, stdout) }()
	if err := cmd.Wait(); err != nil {
		t.Errorf("exit after SIGTERM: %v", err)
	}
}

// syncBuffer is a bytes.Buffer safe to read while a process writes to it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// newLoggingGateway is newTestGateway with its JSON log kept.
func newLoggingGateway(t *testing.T, yamlCfg, upstream string) (*gateway, *httptest.Server, *syncBuffer) {
	t.Helper()
	logs := &syncBuffer{}
	g, srv := newTestGatewayLog(t, yamlCfg, upstream, slog.New(slog.NewJSONHandler(logs, nil)))
	return g, srv, logs
}

func scrape(t *testing.T, g *gateway) string {
	t.Helper()
	rec := httptest.NewRecorder()
	g.metrics.handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	return rec.Body.String()
}

// TestPreflightsHaveTheirOwnQuota (worth a look): preflights spend no
// rule's quota, but a client cannot send the upstream an unlimited stream
// of fake ones either.
func TestPreflightsHaveTheirOwnQuota(t *testing.T) {
	up, srv := newCountingUpstream(t)
	_, gw := newTestGateway(t, minimal+"  preflight: {max_requests: 2}\n", srv.URL)
	pre := map[string]string{"Origin": "https://app.example", "Access-Control-Request-Method": "POST"}
	codes := ""
	for range 4 {
		codes += fmt.Sprint(do(t, "OPTIONS", gw.URL+"/api", pre).StatusCode, " ")
	}
	if codes != "200 200 429 429 " || up.count("OPTIONS /api") != 2 {
		t.Errorf("preflights: %s, upstream saw %d; want 2 through", codes, up.count("OPTIONS /api"))
	}
	for i := 0; i < 10; i++ {
		if code := do(t, "POST", gw.URL+"/api", nil).StatusCode; code != 200 {
			t.Fatalf("request %d after the preflights: %d (the default's 10 are untouched)", i, code)
		}
	}
}

// TestDenyCORSOrigins (worth a look): a 429 the gateway sends is readable
// by scripts of the configured origins only.
func TestDenyCORSOrigins(t *testing.T) {
	_, gw := newTestGateway(t, strings.Replace(minimal, "max_requests: 10", "max_requests: 1", 1)+"  deny_cors_origins: [\"https://app.example\"]\n", okUpstream(t).URL)
	do(t, "GET", gw.URL+"/", nil)
	res := do(t, "GET", gw.URL+"/", map[string]string{"Origin": "https://app.example"})
	if res.StatusCode != 429 || res.Header.Get("Access-Control-Allow-Origin") != "https://app.example" ||
		res.Header.Get("Access-Control-Allow-Credentials") != "true" || res.Header.Get("Vary") != "Origin" {
		t.Errorf("429 for a listed origin: %d %v", res.StatusCode, res.Header)
	}
	if !strings.Contains(res.Header.Get("Access-Control-Expose-Headers"), "Retry-After") {
		t.Errorf("Expose-Headers %q", res.Header.Get("Access-Control-Expose-Headers"))
	}
	res = do(t, "GET", gw.URL+"/", map[string]string{"Origin": "https://evil.example"})
	if res.StatusCode != 429 || res.Header.Get("Access-Control-Allow-Origin") != "" {
		t.Errorf("429 for another origin: %d, Allow-Origin %q", res.StatusCode, res.Header.Get("Access-Control-Allow-Origin"))
	}
	for _, bad := range []string{"app.example", "https://app.example/", "https://app.example/x", "ftp://a"} {
		if _, err := parseConfig([]byte(minimal + "  deny_cors_origins: [\"" + bad + "\"]\n")); err == nil || !strings.Contains(err.Error(), "rate_limiting.deny_cors_origins[0]") {
			t.Errorf("origin %q: %v", bad, err)
		}
	}
}

// TestReloadDropsSeriesOfRemovedRules (worth a look): series of rules a
// reload removed (or a failed reload introduced) stayed in /metrics.
func TestReloadDropsSeriesOfRemovedRules(t *testing.T) {
	withA := minimal + "  rules:\n    - name: gone\n      path_prefix: /a\n"
	g, gw := newTestGateway(t, withA, okUpstream(t).URL)
	do(t, "GET", gw.URL+"/a", nil)
	if !strings.Contains(scrape(t, g), `rule="gone"`) {
		t.Fatal("no series for rule gone before the reload")
	}
	c, err := parseConfig([]byte(minimal))
	if err != nil {
		t.Fatal(err)
	}
	if err := g.load(c); err != nil {
		t.Fatal(err)
	}
	m := scrape(t, g)
	if strings.Contains(m, `rule="gone"`) {
		t.Error("series of the removed rule gone are still exported")
	}
	if !strings.Contains(m, `slidelimit_gateway_decisions_total{outcome="allowed",rule="default"}`) {
		t.Error("the default rule's series went too")
	}
}

// TestBackendFailuresAreLogged (D1): a Redis rule that cannot reach its
// server answered by its on_failure policy with nothing in the log.
func TestBackendFailuresAreLogged(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now: connections are refused
	cfg := minimal + "  redis: {address: \"" + addr + "\", on_failure: open, timeout_ms: 2000}\n  rules:\n    - {name: shared, backend: redis}\n"
	g, gw, logs := newLoggingGateway(t, cfg, okUpstream(t).URL)
	for range 5 {
		if code := do(t, "GET", gw.URL+"/", nil).StatusCode; code != 200 {
			t.Fatalf("on_failure open: %d", code)
		}
	}
	if n := strings.Count(logs.String(), "rate-limit backend failed"); n != 1 {
		t.Errorf("%d backend-failure log lines for 5 failures in a burst, want 1 (throttled):\n%s", n, logs.String())
	}
	if got := testutilCounter(t, g.metrics, "slidelimit_gateway_backend_errors_total", `rule="shared"`); got != 5 {
		t.Errorf("backend errors %v, want 5", got)
	}
}

// TestKeyTableMetrics (worth a look, eviction_policy): operators see how
// full each in-memory rule's key table is and how many new keys found it
// full.
func TestKeyTableMetrics(t *testing.T) {
	g, gw := newTestGateway(t, minimal, okUpstream(t).URL)
	do(t, "GET", gw.URL+"/", nil)
	m := scrape(t, g)
	for _, want := range []string{`slidelimit_gateway_keys{rule="default"} 1`, `slidelimit_gateway_key_overflow_total{rule="default"} 0`} {
		if !strings.Contains(m, want+"\n") {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

// TestW4W5UpstreamTrailersAndEarlyHintsThroughTheGateway: the gateway's
// own proxy relays a 103 and announced trailers; the final response keeps
// our headers and no rate-limit header goes out as a trailer.
func TestW4W5UpstreamTrailersAndEarlyHintsThroughTheGateway(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Link", "</a.css>; rel=preload")
		w.WriteHeader(http.StatusEarlyHints)
		w.Header().Del("Link")
		w.Header().Set("Trailer", "X-RateLimit-Limit, RateLimit, X-Sum")
		w.WriteHeader(200)
		_, _ = io.WriteString(w, "ok")
		w.Header().Set("X-RateLimit-Limit", "5000")
		w.Header().Set("RateLimit", `"up";r=1`)
		w.Header().Set("X-Sum", "1")
	}))
	defer up.Close()
	for _, mode := range []string{"ours", "theirs"} {
		_, gw := newTestGateway(t, minimal+"  upstream_headers: "+mode+"\n", up.URL)
		req, _ := http.NewRequest("GET", gw.URL+"/", nil)
		req.Header.Set("Origin", "https://app.example")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.ReadAll(res.Body)
		res.Body.Close()
		if res.Header.Get("RateLimit") == "" || res.Header.Get("Access-Control-Expose-Headers") == "" {
			t.Errorf("%s: final response lost our headers: %v", mode, res.Header)
		}
		for k := range res.Trailer {
			if strings.Contains(strings.ToLower(k), "ratelimit") {
				t.Errorf("%s: trailer %s %q", mode, k, res.Trailer[k])
			}
		}
		if res.Trailer.Get("X-Sum") != "1" {
			t.Errorf("%s: other trailers lost: %v", mode, res.Trailer)
		}
	}
}

// TestB5TruncatedBodyNeverForwarded: a client that hangs up short of its
// Content-Length must not have its partial body forwarded as if complete
// (the server's body says io.ErrUnexpectedEOF, not io.EOF).
func TestB5TruncatedBodyNeverForwarded(t *testing.T) {
	conns, up := connCounter(t, http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	_, gw := newTestGateway(t, minimal, up.URL)
	for _, size := range []int{10, 40 << 10} { // in memory, and spilled to a file
		c, err := net.Dial("tcp", strings.TrimPrefix(gw.URL, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(c, "POST /up HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n", size+100)
		_, _ = c.Write(bytes.Repeat([]byte("a"), size))
		_ = c.(*net.TCPConn).CloseWrite()
		_ = c.SetReadDeadline(time.Now().Add(failAfter))
		_, _ = io.Copy(io.Discard, c) // whatever comes back, until the gateway closes
		c.Close()
	}
	// The gateway handled both before closing; the upstream saw nothing.
	if n := conns.Load(); n != 0 {
		t.Errorf("%d upstream connections for truncated bodies, want 0", n)
	}
}

// TestClientThatStopsReadingReleasesTheUpstream (self-review, B5's mirror
// image): a client that sends its request and never reads the response
// held the proxy's copy, the upstream connection and the upstream's
// handler for as long as it liked. client_send_timeout_ms bounds the wait
// for each write.
func TestClientThatStopsReadingReleasesTheUpstream(t *testing.T) {
	upstreamDone := make(chan error, 1)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		chunk := bytes.Repeat([]byte("x"), 64<<10)
		for i := 0; i < 4096; i++ { // 256 MiB: far more than any socket buffers
			if _, err := w.Write(chunk); err != nil {
				upstreamDone <- err
				return
			}
		}
		upstreamDone <- nil
	}))
	defer up.Close()
	_, gw := newTestGateway(t, minimal+"proxy:\n  client_send_timeout_ms: 300\n", up.URL)
	c, err := net.Dial("tcp", strings.TrimPrefix(gw.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.(*net.TCPConn).SetReadBuffer(4096)
	fmt.Fprintf(c, "GET /big HTTP/1.1\r\nHost: x\r\n\r\n") // and never read
	select {
	case err := <-upstreamDone:
		if err == nil {
			t.Error("the upstream wrote 256 MiB to a client that read nothing")
		}
	case <-time.After(failAfter):
		t.Fatal("the upstream is still held by a client that stopped reading")
	}
}
