package httplimit

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"
)

func TestExemptionsSkipLimits(t *testing.T) {
	m := mustNew(t, Options{
		Exempt: Exemptions{
			Paths:   []string{"/healthz"},
			Methods: []string{"HEAD"},
			CIDRs:   []netip.Prefix{netip.MustParsePrefix("10.1.0.0/16"), netip.MustParsePrefix("::ffff:172.16.0.0/108")},
			IP:      IPConfig{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("10.9.9.9/32")}},
		},
		Default: &Rule{Name: "d", Engine: logConfig(1, time.Minute, newClock())},
	})
	h := m.Handler(okHandler)
	for i, tc := range []struct {
		method, target, remote string
		hdr                    map[string]string
	}{
		{"GET", "/healthz", "192.0.2.1:1", nil},
		{"GET", "/healthz/live", "192.0.2.1:1", nil},
		{"HEAD", "/", "192.0.2.1:1", nil},
		{"GET", "/", "10.1.2.3:1", nil},
		{"GET", "/", "172.16.5.5:1", nil},
		{"GET", "/", "10.9.9.9:1", map[string]string{"X-Forwarded-For": "10.1.7.7"}}, // via a trusted proxy
		{"OPTIONS", "/api", "192.0.2.1:1", map[string]string{"Origin": "https://a.example", "Access-Control-Request-Method": "POST"}},
	} {
		for range 3 {
			rec := serveRec(h, tc.method, tc.target, tc.remote, tc.hdr)
			if rec.Code != 200 || rec.Header().Get("RateLimit") != "" {
				t.Fatalf("case %d %s %s: %d RateLimit %q, want exempt", i, tc.method, tc.target, rec.Code, rec.Header().Get("RateLimit"))
			}
		}
	}
	if s := m.Stats(); s.Exempt != 21 || s.Allowed != 0 {
		t.Errorf("Stats %+v, want 21 exempt", s)
	}
	// Not exempt: a spoofed XFF from an untrusted peer, a path that only
	// shares letters, and an OPTIONS that is no preflight.
	for i, tc := range []struct {
		method, target, remote string
		hdr                    map[string]string
	}{
		{"GET", "/", "192.0.2.50:1", map[string]string{"X-Forwarded-For": "10.1.7.7"}},
		{"GET", "/healthzx", "192.0.2.51:1", nil},
		{"GET", "/api/../healthz", "192.0.2.53:1", nil}, // not clean: never exempt
		{"GET", "//healthz", "192.0.2.54:1", nil},
		{"OPTIONS", "/", "192.0.2.52:1", nil},
		// IIS and Symfony route by the override header, not the request line.
		{"GET", "/healthz", "192.0.2.55:1", map[string]string{"X-Original-URL": "/admin"}},
		{"GET", "/healthz", "192.0.2.56:1", map[string]string{"X-Rewrite-URL": "/admin"}},
	} {
		serveRec(h, tc.method, tc.target, tc.remote, tc.hdr)
		if rec := serveRec(h, tc.method, tc.target, tc.remote, tc.hdr); rec.Code != 429 {
			t.Errorf("case %d: second request %d, want 429 (not exempt)", i, rec.Code)
		}
	}
}

func TestPreflightExemptWithoutConfig(t *testing.T) {
	m := mustNew(t, Options{Default: &Rule{Name: "d", Engine: logConfig(1, time.Minute, newClock())}})
	h := m.Handler(okHandler)
	pre := map[string]string{"Origin": "https://a.example", "Access-Control-Request-Method": "GET"}
	for range 5 {
		if rec := serveRec(h, "OPTIONS", "/", "", pre); rec.Code != 200 {
			t.Fatalf("preflight: %d", rec.Code)
		}
	}
	if rec := serveRec(h, "GET", "/", "", nil); rec.Code != 200 {
		t.Errorf("real request after preflights: %d, want 200 (preflights consumed nothing)", rec.Code)
	}
}

func TestExemptionsRejectBadInput(t *testing.T) {
	for _, tc := range []struct {
		ex   Exemptions
		want string
	}{
		{Exemptions{Paths: []string{"healthz"}}, `Exempt.Paths[0] "healthz" must start with /`},
		{Exemptions{Methods: []string{""}}, `Exempt.Methods[0] ""`},
		{Exemptions{CIDRs: []netip.Prefix{{}}}, "Exempt.CIDRs[0] is not a valid prefix"},
		{Exemptions{CIDRs: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}, IP: IPConfig{Header: "X-Nope"}}, "IPConfig.Header"},
	} {
		_, err := New(Options{Exempt: tc.ex})
		if err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, ErrInvalidOptions) {
			t.Errorf("%+v: err %v, want %q", tc.ex, err, tc.want)
		}
	}
}

// TestExemptionsMatchOnlyPlainPaths: an exemption by path prefix holds only for
// a path every server reads the same; "..;" (servlet), "\" and
// percent-encoded spellings that path.Clean called clean were exempt and
// forwarded raw.
func TestExemptionsMatchOnlyPlainPaths(t *testing.T) {
	m := mustNew(t, Options{
		Default: &Rule{Name: "d", Engine: logConfig(1000, time.Minute, newClock())},
		Exempt:  Exemptions{Paths: []string{"/healthz"}},
	})
	h := m.Handler(okHandler)
	for _, target := range []string{"/healthz", "/healthz/", "/healthz/live", "/healthz/live.json"} {
		if p := policyOf(h, "GET", target); p != "" {
			t.Errorf("GET %s: limited (%q), want exempt", target, p)
		}
	}
	for _, target := range []string{
		"/healthz/..;/admin", "/healthz/%2e%2e;/admin", `/healthz/..%5cadmin`, "/healthz/../admin",
		"/healthz%2F..%2Fadmin", "/HEALTHZ", "//healthz", "/healthz;x=1", "/healthz/%61dmin", "/healthz/a%20b",
		// IIS strips a segment's trailing dots: not every server reads these alike.
		"/healthz/...", "/healthz/.../admin", "/healthz/live.",
	} {
		if p := policyOf(h, "GET", target); p == "" {
			t.Errorf("GET %s: exempt, want limited", target)
		}
	}
	if _, err := New(Options{Exempt: Exemptions{Paths: []string{"/a/../b"}}}); err == nil {
		t.Error("exempt path /a/../b accepted")
	}
	mm := mustNew(t, Options{Default: &Rule{Name: "d", Engine: logConfig(10, time.Minute, newClock())}, Exempt: Exemptions{Methods: []string{"HEAD"}}})
	if p := policyOf(mm.Handler(okHandler), "head", "/"); p == "" {
		t.Error(`method "head" exempt by "HEAD": an upstream reading methods case-sensitively routes it elsewhere`)
	}
}

// TestPreflightHasItsOwnQuota: CORS preflights never spend a rule's quota,
// but with Options.Preflight they are not an unlimited free channel to
// the upstream either.
func TestPreflightHasItsOwnQuota(t *testing.T) {
	clk := newClock()
	m := mustNew(t, Options{
		Default:   &Rule{Name: "d", Engine: logConfig(1, time.Minute, clk)},
		Preflight: &Rule{Name: "preflight", Engine: logConfig(2, time.Minute, clk)},
	})
	h := m.Handler(okHandler)
	pre := map[string]string{"Origin": "https://app.example", "Access-Control-Request-Method": "POST"}
	for i, want := range []int{200, 200, 429} {
		rec := serveRec(h, "OPTIONS", "/x", "", pre)
		if rec.Code != want || !strings.Contains(rec.Header().Get("RateLimit-Policy"), `"preflight"`) {
			t.Errorf("preflight %d: %d %q, want %d under the preflight policy", i, rec.Code, rec.Header().Get("RateLimit-Policy"), want)
		}
	}
	if rec := serveRec(h, "POST", "/x", "", nil); rec.Code != 200 {
		t.Errorf("the real request after the preflights: %d, want 200 (its quota untouched)", rec.Code)
	}
	rs := m.RuleStats()
	if len(rs) != 2 || rs[1] != (RuleStats{Rule: "preflight", Allowed: 2, Denied: 1}) {
		t.Errorf("RuleStats %+v", rs)
	}
	// Without Preflight they are exempt.
	m2 := mustNew(t, Options{Default: &Rule{Name: "d", Engine: logConfig(1, time.Minute, clk)}})
	for range 3 {
		if rec := serveRec(m2.Handler(okHandler), "OPTIONS", "/x", "", pre); rec.Code != 200 || rec.Header().Get("RateLimit") != "" {
			t.Fatalf("preflight without a Preflight rule: %d %q", rec.Code, rec.Header().Get("RateLimit"))
		}
	}
	if _, err := New(Options{Preflight: &Rule{Name: "p", Method: "OPTIONS", Engine: logConfig(1, time.Minute, clk)}}); err == nil {
		t.Error("Preflight with a Method accepted")
	}
}
