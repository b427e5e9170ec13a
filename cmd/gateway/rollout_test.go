package main

import (
	"errors"
	"fmt"
	"math"
	"net/http/httptest"
	"strings"
	"testing"
)

// rolloutConfig has a canary rule on /api (one request per client and
// minute, enforce_percent given), a shadow rule on /new (one request per
// client and minute), and an enforcing default (five per client and
// minute), all keyed by X-API-Key. The default limits what the rules on
// trial decide in shadow, as it did before they were added.
func rolloutConfig(percent string) string {
	return `
rate_limiting:
  sliding_window:
    window_size_ms: 60000
    max_requests: 5
  algorithm: log
  key: header
  rules:
    - name: api
      path_prefix: /api
      max_requests: 1
      enforce_percent: ` + percent + `
    - name: new
      path_prefix: /new
      max_requests: 1
      dry_run: true
`
}

// serveKey runs one GET of path for client key through the gateway in
// this process and returns its status.
func serveKey(g *gateway, path, key string) int {
	req := httptest.NewRequest("GET", path, nil)
	req.Header.Set("X-API-Key", key)
	rec := httptest.NewRecorder()
	g.ServeHTTP(rec, req)
	return rec.Code
}

func reload(t *testing.T, g *gateway, cfg string) {
	t.Helper()
	c, err := parseConfig([]byte(cfg))
	if err != nil {
		t.Fatal(err)
	}
	if err := g.load(c); err != nil {
		t.Fatal(err)
	}
}

// TestShadowedRuleFromYAMLNeverRefusesWhileTheDefaultDoes: dry_run on a
// rule shadows that rule alone, and the default still limits the
// requests the shadow rule decides (it limited /new before the rule came):
// client-a's sixth request to /new is refused by the default.
func TestShadowedRuleFromYAMLNeverRefusesWhileTheDefaultDoes(t *testing.T) {
	g, _ := newTestGateway(t, rolloutConfig("100"), okUpstream(t).URL)
	for i := range 5 {
		if code := serveKey(g, "/new", "client-a"); code != 200 {
			t.Errorf("shadowed rule, request %d: %d, want 200", i, code)
		}
	}
	if code := serveKey(g, "/new", "client-a"); code != 429 {
		t.Errorf("sixth request to /new: %d, want 429 from the default", code)
	}
	for i := range 5 {
		if code := serveKey(g, "/", "client-b"); code != 200 {
			t.Errorf("default policy, request %d: %d, want 200", i, code)
		}
	}
	if code := serveKey(g, "/", "client-b"); code != 429 {
		t.Errorf("default policy past its limit: %d, want 429", code)
	}
	for _, c := range []struct {
		labels string
		want   float64
	}{
		{`cohort="shadow",outcome="allowed",rule="new"`, 1},
		{`cohort="shadow",outcome="dry_run_denied",rule="new"`, 5},
		{`cohort="enforced",outcome="denied",rule="default"`, 2},
		{`cohort="enforced",outcome="allowed",rule="default"`, 10},
	} {
		if got := testutilCounter(t, g.metrics, "slidelimit_gateway_cohort_decisions_total", c.labels); got != c.want {
			t.Errorf("cohort_decisions_total{%s} = %v, want %v", c.labels, got, c.want)
		}
	}
}

// TestCanaryCohortsSurviveReloads: with enforce_percent 5 about 5 % of
// 2,000 clients are refused past the limit (within 4 sigma); a reload
// that keeps the percentage (another rule's limit changes) keeps every
// client's cohort and the rule's counts; a reload to 20 % keeps every
// enforced client enforced and adds others, about 20 % in all; /metrics
// splits the refusals by cohort.
func TestCanaryCohortsSurviveReloads(t *testing.T) {
	const n = 2000
	within := func(count int, p float64) bool {
		return math.Abs(float64(count)-n*p) <= 4*math.Sqrt(n*p*(1-p))
	}
	cfg := rolloutConfig("5")
	g, _ := newTestGateway(t, cfg, okUpstream(t).URL)
	key := func(i int) string { return fmt.Sprintf("client-%04d", i) }
	enforced := make([]bool, n)
	count := 0
	for i := range n {
		if code := serveKey(g, "/api", key(i)); code != 200 {
			t.Fatalf("client %d first request: %d", i, code)
		}
		enforced[i] = serveKey(g, "/api", key(i)) == 429
		if enforced[i] {
			count++
		}
	}
	if !within(count, 0.05) {
		t.Errorf("%d of %d clients enforced at enforce_percent 5, want about %d", count, n, n/20)
	}

	reload(t, g, strings.Replace(cfg, "max_requests: 1\n      dry_run: true", "max_requests: 7\n      dry_run: true", 1))
	for i := range n {
		// The rule kept its counts (every client has used its one
		// request), so an enforced client is refused at once.
		if got := serveKey(g, "/api", key(i)) == 429; got != enforced[i] {
			t.Fatalf("after a reload keeping the percentage: client %d enforced=%v, was %v", i, got, enforced[i])
		}
	}

	reload(t, g, rolloutConfig("20"))
	count20 := 0
	for i := range n {
		got := serveKey(g, "/api", key(i)) == 429
		if enforced[i] && !got {
			t.Fatalf("after raising enforce_percent to 20: client %d, enforced at 5, is not", i)
		}
		if got {
			count20++
		}
	}
	t.Logf("clients enforced: %d of %d at enforce_percent 5, %d at 20", count, n, count20)
	if !within(count20, 0.20) {
		t.Errorf("%d of %d clients enforced at enforce_percent 20, want about %d", count20, n, n/5)
	}

	refused := func(cohort, outcome string) float64 {
		return testutilCounter(t, g.metrics, "slidelimit_gateway_cohort_decisions_total",
			`cohort="`+cohort+`",outcome="`+outcome+`",rule="api"`)
	}
	wantEnforced := float64(2*count + count20)         // second request, after the first reload, after the second
	wantShadow := float64(2*(n-count) + (n - count20)) // the same for the shadow cohort
	if got := refused("enforced", "denied"); got != wantEnforced {
		t.Errorf("enforced cohort's denials %v, want %v", got, wantEnforced)
	}
	if got := refused("shadow", "dry_run_denied"); got != wantShadow {
		t.Errorf("shadow cohort's would-be denials %v, want %v", got, wantShadow)
	}
}

// TestRolloutFieldsAreValidated: enforce_percent outside [0, 100] or NaN,
// and a dry_run that is not a boolean, are refused naming the field, on a
// rule, a tier and the default policy.
func TestRolloutFieldsAreValidated(t *testing.T) {
	tier := "  tiers:\n    - {name: pro, api_keys: [\"" + tierKey + "\"], %s}\n"
	rule := "  rules:\n    - {name: r, %s}\n"
	for _, c := range []struct{ cfg, field string }{
		{minimal + fmt.Sprintf(rule, "enforce_percent: 100.5"), "rate_limiting.rules[0].enforce_percent"},
		{minimal + fmt.Sprintf(rule, "enforce_percent: -1"), "rate_limiting.rules[0].enforce_percent"},
		{minimal + fmt.Sprintf(rule, "enforce_percent: .nan"), "rate_limiting.rules[0].enforce_percent"},
		{minimal + fmt.Sprintf(tier, "enforce_percent: 101"), "rate_limiting.tiers[0].enforce_percent"},
		{minimal + "    enforce_percent: .inf\n", "rate_limiting.sliding_window.enforce_percent"},
		{minimal + fmt.Sprintf(rule, "dry_run: 1"), "rate_limiting.rules[0].dry_run"},
	} {
		_, err := parseConfig([]byte(c.cfg))
		if err == nil || !errors.Is(err, errConfig) || !strings.Contains(err.Error(), c.field) {
			t.Errorf("%s: err %v, want a config error naming %s", c.cfg, err, c.field)
		}
	}
	c, err := parseConfig([]byte(minimal + "    enforce_percent: 2.5\n    dry_run: false\n" + fmt.Sprintf(rule, "enforce_percent: 0, dry_run: true") + fmt.Sprintf(tier, "enforce_percent: 50")))
	if err != nil {
		t.Fatal(err)
	}
	r, tr, d := c.opts.Rules[0], c.opts.Rules[1], c.opts.Default
	if *r.EnforcePercent != 0 || !*r.DryRun || *tr.EnforcePercent != 50 || tr.DryRun != nil || *d.EnforcePercent != 2.5 || *d.DryRun {
		t.Errorf("rule %v/%v, tier %v/%v, default %v/%v", *r.EnforcePercent, *r.DryRun, *tr.EnforcePercent, tr.DryRun, *d.EnforcePercent, *d.DryRun)
	}
}
