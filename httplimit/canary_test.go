package httplimit

import (
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/slidelimit/slidelimit/engine"
)

func boolp(b bool) *bool      { return &b }
func pctp(p float64) *float64 { return &p }
func apiKey(i int) map[string]string {
	return map[string]string{"X-Api-Key": fmt.Sprintf("client-%05d", i)}
}

// TestShadowedRuleNeverRefusesWhileOthersDo: one rule in shadow
// (Rule.DryRun) passes every request it would refuse, advertising r=0
// without Retry-After and counting DryRunDenied, while the other rules
// and the default keep refusing. Its requests are still the default's
// (limit 5), as they were before the shadow rule was added: client A's
// sixth request to /new is refused by the default.
func TestShadowedRuleNeverRefusesWhileOthersDo(t *testing.T) {
	clk := newClock()
	m := mustNew(t, Options{Rules: []Rule{
		{Name: "new", PathPrefix: "/new", DryRun: boolp(true), Engine: logConfig(1, time.Minute, clk)},
		{Name: "old", PathPrefix: "/old", Engine: logConfig(1, time.Minute, clk)},
	}, Default: &Rule{Name: "default", Engine: logConfig(5, time.Minute, clk)}})
	h := m.Handler(okHandler)
	const a, b = "192.0.2.1:1", "192.0.2.2:1"
	for i := range 5 {
		rec := serveRec(h, "GET", "/new", a, nil)
		if rec.Code != 200 {
			t.Fatalf("shadowed rule, request %d: %d, want 200", i, rec.Code)
		}
		if i > 0 {
			if got, want := rec.Header().Get("RateLimit"), `"new";r=0;t=60, "default";r=`; !strings.HasPrefix(got, want) {
				t.Errorf("shadowed rule, request %d: RateLimit %q, want its would-be refusal r=0;t=60 beside the default's", i, got)
			}
			if got := rec.Header().Get("Retry-After"); got != "" {
				t.Errorf("shadowed rule, request %d: Retry-After %q on a passed request", i, got)
			}
		}
	}
	if rec := serveRec(h, "GET", "/new", a, nil); rec.Code != 429 {
		t.Errorf("sixth request to /new: %d, want 429 from the default, which decided /new before the shadow rule came", rec.Code)
	}
	for path, limit := range map[string]int{"/old": 1, "/": 5} {
		for i := range limit {
			if rec := serveRec(h, "GET", path, b, nil); rec.Code != 200 {
				t.Fatalf("%s request %d: %d", path, i, rec.Code)
			}
		}
		if rec := serveRec(h, "GET", path, b, nil); rec.Code != 429 {
			t.Errorf("%s past its limit: %d, want 429 (its rule enforces)", path, rec.Code)
		}
	}
	// /new: 1 allowed, 4 passed as would-be refusals, the sixth refused;
	// /old: 1 allowed, 1 refused; /: 5 allowed, 1 refused.
	if s := m.Stats(); s != (Stats{Allowed: 7, Denied: 3, DryRunDenied: 4}) {
		t.Errorf("Stats %+v, want 7 allowed, 3 denied, 4 dry-run denied", s)
	}
	rs := m.RuleStats()
	if rs[0] != (RuleStats{Rule: "new", Allowed: 1, ShadowAllowed: 1, DryRunDenied: 5}) {
		t.Errorf("shadowed rule's RuleStats %+v", rs[0])
	}
	if rs[1] != (RuleStats{Rule: "old", Allowed: 1, Denied: 1}) {
		t.Errorf("enforcing rule's RuleStats %+v", rs[1])
	}
	if rs[2] != (RuleStats{Rule: "default", Allowed: 10, Denied: 2}) {
		t.Errorf("default's RuleStats %+v, want 10 allowed (5 on /new, 5 on /), 2 denied", rs[2])
	}
}

// TestRuleDryRunOverridesTheGlobalSwitch: Options.DryRun is the default
// of rules that leave DryRun nil; DryRun false enforces one rule while
// the rest stay in shadow.
func TestRuleDryRunOverridesTheGlobalSwitch(t *testing.T) {
	clk := newClock()
	m := mustNew(t, Options{DryRun: true, Rules: []Rule{
		{Name: "enforced", PathPrefix: "/e", DryRun: boolp(false), Engine: logConfig(1, time.Minute, clk)},
		{Name: "inherits", PathPrefix: "/i", Engine: logConfig(1, time.Minute, clk)},
	}})
	h := m.Handler(okHandler)
	for i := range 3 {
		if rec := serveRec(h, "GET", "/i", "", nil); rec.Code != 200 {
			t.Errorf("rule inheriting the global dry run, request %d: %d, want 200", i, rec.Code)
		}
	}
	serveRec(h, "GET", "/e", "", nil)
	if rec := serveRec(h, "GET", "/e", "", nil); rec.Code != 429 {
		t.Errorf("rule with DryRun false under a global dry run: %d, want 429", rec.Code)
	}
}

// TestStackedShadowRuleNeitherRefusesNorStopsTheEnforcingRules: under
// MatchAll an enforcing rule counts every request that passes although a
// shadow rule beside it would refuse it (else the shadow rule would open a
// hole in the enforced limit), and the shadow rule takes nothing from the
// requests it would refuse.
func TestStackedShadowRuleNeitherRefusesNorStopsTheEnforcingRules(t *testing.T) {
	clk := newClock()
	m := mustNew(t, Options{MatchAll: true, Rules: []Rule{
		{Name: "login", Method: "POST", PathPrefix: "/login", DryRun: boolp(true), Engine: logConfig(1, time.Minute, clk)},
		{Name: "all", Engine: logConfig(3, time.Minute, clk)},
	}})
	h := m.Handler(okHandler)
	want := []struct {
		code int
		rl   string
	}{
		{200, `"login";r=0;t=60, "all";r=2`},      // both take
		{200, `"login";r=0;t=60, "all";r=1`},      // login would refuse; all still takes
		{200, `"login";r=0;t=60, "all";r=0;t=60`}, // all's last unit
		{429, `"login";r=0;t=60, "all";r=0;t=60`}, // all refuses
	}
	for i, w := range want {
		rec := serveRec(h, "POST", "/login", "", nil)
		if rec.Code != w.code || rec.Header().Get("RateLimit") != w.rl {
			t.Errorf("request %d: %d %q, want %d %q", i, rec.Code, rec.Header().Get("RateLimit"), w.code, w.rl)
		}
	}
	if s := m.Stats(); s != (Stats{Allowed: 1, DryRunDenied: 2, Denied: 1}) {
		t.Errorf("Stats %+v, want 1 allowed, 2 dry-run denied, 1 denied", s)
	}
	rs := m.RuleStats()
	if rs[0] != (RuleStats{Rule: "login", Allowed: 1, ShadowAllowed: 1, DryRunDenied: 3}) || rs[1] != (RuleStats{Rule: "all", Allowed: 3, Denied: 1}) {
		t.Errorf("RuleStats %+v", rs)
	}
}

// binomialBound is 4 standard deviations of a binomial(n, p) count: a
// fair coin per key lands outside it with probability about 6e-5, and the
// hash is fixed, so a test that passes once passes always.
func binomialBound(n int, p float64) float64 { return 4 * math.Sqrt(float64(n)*p*(1-p)) }

// TestCanaryEnforcesItsShareOfKeysStably: with EnforcePercent 5, about
// 5 % of 10,000 clients are refused past the limit (within 4 sigma of
// 500), the others pass as shadow; each client's cohort is the same on
// every request, and RuleStats splits the refusals by cohort.
func TestCanaryEnforcesItsShareOfKeysStably(t *testing.T) {
	const n = 10000
	var mu sync.Mutex
	shadowEvents := map[bool]int{}
	m := mustNew(t, Options{
		Key:     Header("X-Api-Key"),
		Default: &Rule{Name: "canary", EnforcePercent: pctp(5), Engine: logConfig(1, time.Minute, newClock())},
		Observe: func(_ *http.Request, e Event) {
			if e.Outcome != OutcomeAllowed {
				mu.Lock()
				shadowEvents[e.Shadow]++
				mu.Unlock()
			}
		},
	})
	h := m.Handler(okHandler)
	enforced := make([]bool, n)
	count := 0
	for i := range n {
		if rec := serveRec(h, "GET", "/", "", apiKey(i)); rec.Code != 200 {
			t.Fatalf("client %d first request: %d", i, rec.Code)
		}
		rec := serveRec(h, "GET", "/", "", apiKey(i))
		enforced[i] = rec.Code == 429
		if enforced[i] {
			count++
		}
	}
	t.Logf("%d of %d clients enforced at 5 %%", count, n)
	if d := math.Abs(float64(count) - n*0.05); d > binomialBound(n, 0.05) {
		t.Errorf("%d of %d clients enforced at 5 %%, want 500 +- %.0f", count, n, binomialBound(n, 0.05))
	}
	for round := range 2 {
		for i := range n {
			rec := serveRec(h, "GET", "/", "", apiKey(i))
			if got := rec.Code == 429; got != enforced[i] {
				t.Fatalf("round %d: client %d enforced=%v, was %v: its cohort changed", round, i, got, enforced[i])
			}
		}
	}
	rs := m.RuleStats()[0]
	e, s := rs.Enforced(), rs.Shadow()
	if e.Allowed != uint64(count) || e.Refused != uint64(3*count) || s.Allowed != uint64(n-count) || s.Refused != uint64(3*(n-count)) {
		t.Errorf("cohorts enforced %+v shadow %+v, want %d/%d and %d/%d", e, s, count, 3*count, n-count, 3*(n-count))
	}
	if shadowEvents[false] != 3*count || shadowEvents[true] != 3*(n-count) {
		t.Errorf("refusal events by Event.Shadow %v, want false:%d true:%d", shadowEvents, 3*count, 3*(n-count))
	}
}

// TestCanaryShareHoldsForEveryKeyShape: the share enforced stays within
// 4 sigma of the percentage for keys that differ only in their last
// bytes (sequential IPv4 and IPv6 addresses, numbered API keys) and for
// several percentages: the hash's top bits depend on every key byte.
func TestCanaryShareHoldsForEveryKeyShape(t *testing.T) {
	const n = 20000
	shapes := map[string]func(int) string{
		"ipv4":    func(i int) string { return fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&255) },
		"ipv6/64": func(i int) string { return fmt.Sprintf("2001:db8:%x:%x::", i>>16, i&0xffff) },
		"api-key": func(i int) string { return fmt.Sprintf("key-%d", i) },
	}
	for name, key := range shapes {
		for _, pct := range []float64{0.5, 1, 5, 25, 50, 99.5} {
			c, err := newCohort(&Rule{Name: "r", EnforcePercent: &pct}, false, "Default")
			if err != nil {
				t.Fatal(err)
			}
			count := 0
			for i := range n {
				if !c.shadowFor(key(i)) {
					count++
				}
			}
			p := pct / 100
			if d := math.Abs(float64(count) - n*p); d > binomialBound(n, p) {
				t.Errorf("%s keys at %v %%: %d of %d enforced, want %.0f +- %.0f", name, pct, count, n, n*p, binomialBound(n, p))
			}
		}
	}
}

// TestCanaryRaisingThePercentageOnlyAddsKeys: the cohort is chosen by a
// threshold on a fixed hash, so every key enforced at 1 % is enforced at
// 5 % and at 50 %; 0 enforces none, 100 (and nil) all; two Middlewares
// (a reload) with the same rule name agree on every key; another rule
// name draws another sample.
func TestCanaryRaisingThePercentageOnlyAddsKeys(t *testing.T) {
	cohortAt := func(name string, pct *float64) cohort {
		c, err := newCohort(&Rule{Name: name, EnforcePercent: pct}, false, "Default")
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	steps := []cohort{cohortAt("api", pctp(0)), cohortAt("api", pctp(1)), cohortAt("api", pctp(5)), cohortAt("api", pctp(50)), cohortAt("api", pctp(100)), cohortAt("api", nil)}
	other := cohortAt("other", pctp(5))
	same := 0
	for i := range 10000 {
		k := fmt.Sprintf("192.0.%d.%d", i>>8, i&255)
		prev := false
		for j, c := range steps {
			e := !c.shadowFor(k)
			if prev && !e {
				t.Fatalf("key %s enforced at step %d but not at step %d: raising the percentage re-chose it", k, j-1, j)
			}
			prev = e
		}
		if steps[0].shadowFor(k) != true || steps[4].shadowFor(k) || steps[5].shadowFor(k) {
			t.Fatalf("key %s: 0 %% must enforce no key, 100 %% and nil every key", k)
		}
		if !steps[2].shadowFor(k) && !other.shadowFor(k) {
			same++
		}
	}
	// Independent 5 % samples share about 0.25 % of the keys (25 of
	// 10,000); identical ones would share 500.
	if same > 25+int(binomialBound(10000, 0.0025)) {
		t.Errorf("rules api and other, both at 5 %%, enforce %d keys in common: their samples are not independent", same)
	}
}

func TestEnforcePercentOutOfRangeIsRefused(t *testing.T) {
	for _, p := range []float64{math.NaN(), -0.001, 100.001, math.Inf(1), math.Inf(-1)} {
		_, err := New(Options{Rules: []Rule{{Name: "r", EnforcePercent: pctp(p), Engine: logConfig(1, time.Minute, newClock())}}})
		if !errors.Is(err, ErrInvalidOptions) || err == nil || !strings.Contains(err.Error(), "Rules[0] (r).EnforcePercent") {
			t.Errorf("EnforcePercent %v: err %v, want ErrInvalidOptions naming Rules[0] (r).EnforcePercent", p, err)
		}
	}
	for _, p := range []float64{0, 0.001, 99.999999999999999, 100} {
		if _, err := New(Options{Default: &Rule{Name: "d", EnforcePercent: pctp(p), Engine: logConfig(1, time.Minute, newClock())}}); err != nil {
			t.Errorf("EnforcePercent %v: %v", p, err)
		}
	}
}

// TestCanaryAllowedPathAllocations: the cohort test adds no allocation
// to the allowed path.
func TestCanaryAllowedPathAllocations(t *testing.T) {
	m, err := New(Options{Default: &Rule{Name: "default", EnforcePercent: pctp(50), Engine: logConfig(1000, time.Second, newClock())}})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	m.def.rl = fixedLimiter{engine.Decision{Allowed: true, Limit: 1000, Remaining: 999, ResetAfter: time.Second}}
	m.def.eng = nil
	h := m.Handler(noopHandler)
	req := httptest.NewRequest("GET", "/", nil)
	req.RemoteAddr = "192.0.2.1:4711"
	w := &headerWriter{h: http.Header{}}
	allocs := testing.AllocsPerRun(200, func() {
		clear(w.h)
		h.ServeHTTP(w, req)
	})
	if allocs > 2 {
		t.Errorf("allowed request of a canary rule allocates %v times in the middleware, want <= 2 (as without one)", allocs)
	}
}

func BenchmarkCohortHash(b *testing.B) {
	c, _ := newCohort(&Rule{Name: "api", EnforcePercent: pctp(5)}, false, "Default")
	b.ReportAllocs()
	n := 0
	for b.Loop() {
		if c.shadowFor("203.0.113.195") {
			n++
		}
	}
	_ = n
}

// TestSetLimitOnACanaryRuleAppliesToBothCohorts: SetLimit changes the
// numbers every key of a canary rule is decided by, each key keeping its
// cohort and its count.
func TestSetLimitOnACanaryRuleAppliesToBothCohorts(t *testing.T) {
	ec := logConfig(1, time.Minute, newClock())
	ec.MaxLimit = 10
	m := mustNew(t, Options{Key: Header("X-Api-Key"), Default: &Rule{Name: "canary", EnforcePercent: pctp(50), Engine: ec}})
	var in, out string
	for i := 0; in == "" || out == ""; i++ {
		k := fmt.Sprintf("client-%05d", i)
		if m.def.cohort.shadowFor(k) {
			out = k
		} else {
			in = k
		}
	}
	h := m.Handler(okHandler)
	for _, k := range []string{in, out} {
		serveRec(h, "GET", "/", "", map[string]string{"X-Api-Key": k})
	}
	if err := m.SetLimit("canary", 2); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		key      string
		code1    int
		code2    int
		rl1, rl2 string
	}{
		// Each used 1 of 2: one more passes, then the enforced key is
		// refused and the shadow key passes, both at r=0.
		{in, 200, 429, `"canary";r=0;t=60`, `"canary";r=0;t=60`},
		{out, 200, 200, `"canary";r=0;t=60`, `"canary";r=0;t=60`},
	} {
		for j, w := range []struct {
			code int
			rl   string
		}{{c.code1, c.rl1}, {c.code2, c.rl2}} {
			rec := serveRec(h, "GET", "/", "", map[string]string{"X-Api-Key": c.key})
			if rec.Code != w.code || rec.Header().Get("RateLimit") != w.rl || rec.Header().Get("RateLimit-Policy") != `"canary";q=2;w=60` {
				t.Errorf("key %s request %d after SetLimit(2): %d %q %q, want %d %q q=2", c.key, j, rec.Code,
					rec.Header().Get("RateLimit"), rec.Header().Get("RateLimit-Policy"), w.code, w.rl)
			}
		}
	}
}

// TestShadowRuleDoesNotLengthenAnEnforcedRefusalsRetryAfter: under
// MatchAll a rule on trial in shadow with a long window (1 h) beside an
// enforced per-minute rule: when the enforced rule refuses, Retry-After
// and the problem detail say its wait (about a minute), not the shadow rule's hour,
// which the client is not held to.
func TestShadowRuleDoesNotLengthenAnEnforcedRefusalsRetryAfter(t *testing.T) {
	clk := newClock()
	var denial Denial
	m := mustNew(t, Options{MatchAll: true, Rules: []Rule{
		{Name: "new", DryRun: boolp(true), Engine: logConfig(1, time.Hour, clk)},
		{Name: "all", Engine: logConfig(2, time.Minute, clk)},
	}, OnDeny: func(w http.ResponseWriter, r *http.Request, d Denial) {
		denial = d
		DenyProblem(w, r, d)
	}})
	h := m.Handler(okHandler)
	for i := range 2 {
		if rec := serveRec(h, "GET", "/", "", nil); rec.Code != 200 {
			t.Fatalf("request %d: %d, want 200", i, rec.Code)
		}
	}
	rec := serveRec(h, "GET", "/", "", nil)
	if rec.Code != 429 {
		t.Fatalf("third request: %d, want 429 from the enforced rule", rec.Code)
	}
	// The enforced rule's wait rounded up: 61 s (as in
	// TestStackedRetryAfterNeverBeforeAnyEffectiveWindow), not 3601.
	if got := rec.Header().Get("Retry-After"); got != "61" {
		t.Errorf("Retry-After %q, want 61 (the enforced rule's wait, not the shadow rule's hour)", got)
	}
	if denial.Rule != "all" || denial.RetryAfter != 61*time.Second {
		t.Errorf("Denial %s %v, want all 1m1s", denial.Rule, denial.RetryAfter)
	}
	if !strings.Contains(rec.Body.String(), "retry in 61 s") {
		t.Errorf("problem detail disagrees with Retry-After: %s", rec.Body)
	}
}

// TestRuleOnTrialLeavesItsRequestsToTheRuleThatDecidedThemBefore: adding
// a rule in shadow takes no request away from the rule that decided it
// before: in first-match order the next matching rule still applies, and
// (in either mode) so does the default when no other rule matches. Before,
// a shadow rule on /api/v2 left /api/v2 unlimited.
func TestRuleOnTrialLeavesItsRequestsToTheRuleThatDecidedThemBefore(t *testing.T) {
	for _, c := range []struct {
		name     string
		matchAll bool
		rules    []Rule
		def      int // the default's limit
		refuser  string
	}{
		{"first match, the next rule", false, []Rule{{Name: "api", PathPrefix: "/api", Engine: logConfig(2, time.Minute, nil)}}, 100, "api"},
		{"first match, the default", false, nil, 2, "default"},
		{"match all, the default", true, nil, 2, "default"},
	} {
		t.Run(c.name, func(t *testing.T) {
			clk := newClock()
			rules := []Rule{{Name: "new", PathPrefix: "/api/v2", DryRun: boolp(true), Engine: logConfig(1, time.Minute, clk)}}
			for _, r := range c.rules {
				r.Engine.Clock = clk
				rules = append(rules, r)
			}
			var denial Denial
			m := mustNew(t, Options{MatchAll: c.matchAll, Rules: rules, Default: &Rule{Name: "default", Engine: logConfig(c.def, time.Minute, clk)},
				OnDeny: func(w http.ResponseWriter, r *http.Request, d Denial) { denial = d; DenyProblem(w, r, d) }})
			h := m.Handler(okHandler)
			for i := range 2 {
				if rec := serveRec(h, "GET", "/api/v2/items", "", nil); rec.Code != 200 {
					t.Fatalf("request %d: %d", i, rec.Code)
				}
			}
			rec := serveRec(h, "GET", "/api/v2/items", "", nil)
			if rec.Code != 429 || denial.Rule != c.refuser {
				t.Fatalf("third request: %d refused by %q, want 429 by %s, which decided /api/v2 before the shadow rule came", rec.Code, denial.Rule, c.refuser)
			}
			if rs := m.RuleStats()[0]; rs.Denied != 0 || rs.DryRunDenied != 2 {
				t.Errorf("shadow rule's RuleStats %+v, want 2 dry-run denied, none denied", rs)
			}
		})
	}
}

// TestCanaryEnforcedCohortAloneDecidesItsKeys: a canary rule decides the
// keys it enforces alone (the default neither applies nor counts them),
// and leaves its shadow cohort to the default, which limited every key
// before the canary.
func TestCanaryEnforcedCohortAloneDecidesItsKeys(t *testing.T) {
	clk := newClock()
	canary := Rule{Name: "canary", PathPrefix: "/api", EnforcePercent: pctp(50), Engine: logConfig(100, time.Minute, clk)}
	m := mustNew(t, Options{Key: Header("X-Api-Key"), Rules: []Rule{canary},
		Default: &Rule{Name: "default", Engine: logConfig(1, time.Minute, clk)}})
	co, err := newCohort(&canary, false, "Rules[0]")
	if err != nil {
		t.Fatal(err)
	}
	h := m.Handler(okHandler)
	var enforced, shadow int
	for i := range 40 {
		k := apiKey(i)
		first := serveRec(h, "GET", "/api/x", "", k)
		second := serveRec(h, "GET", "/api/x", "", k)
		if co.shadowFor(k["X-Api-Key"]) {
			shadow++
			if first.Code != 200 || second.Code != 429 {
				t.Errorf("shadow-cohort key %d: %d then %d, want 200 then 429 from the default", i, first.Code, second.Code)
			}
			continue
		}
		enforced++
		if first.Code != 200 || second.Code != 200 || strings.Contains(second.Header().Get("RateLimit"), "default") {
			t.Errorf("enforced key %d: %d then %d (%q), want 200 twice, decided by the canary rule alone", i, first.Code, second.Code, second.Header().Get("RateLimit"))
		}
	}
	if enforced == 0 || shadow == 0 {
		t.Fatalf("%d enforced and %d shadow keys of 40 at 50 %%: the test needs both", enforced, shadow)
	}
	rs := m.RuleStats()
	if rs[1] != (RuleStats{Rule: "default", Allowed: uint64(shadow), Denied: uint64(shadow)}) {
		t.Errorf("default's RuleStats %+v, want %d allowed and %d denied (the shadow cohort's keys only)", rs[1], shadow, shadow)
	}
}

// TestRuleOnTrialRefusesNothingForAMissingKey: a shadow or canary rule
// whose key function fails (FailOpen false) does not answer 400: it counts
// the key error and leaves the request to the rules that decided it
// before (here the default), or passes it when there are none.
func TestRuleOnTrialRefusesNothingForAMissingKey(t *testing.T) {
	for _, trial := range []Rule{
		{Name: "trial", PathPrefix: "/api", DryRun: boolp(true)},
		{Name: "trial", PathPrefix: "/api", EnforcePercent: pctp(5)},
	} {
		for _, withDefault := range []bool{true, false} {
			clk := newClock()
			trial.Key, trial.Engine = Header("X-Api-Key"), logConfig(1, time.Minute, clk)
			opts := Options{Rules: []Rule{trial}}
			if withDefault {
				opts.Default = &Rule{Name: "default", Engine: logConfig(1, time.Minute, clk)}
			} else {
				opts.Rules = append(opts.Rules, Rule{Name: "other", PathPrefix: "/other", Engine: logConfig(1, time.Minute, clk)})
			}
			m := mustNew(t, opts)
			h := m.Handler(okHandler)
			first := serveRec(h, "GET", "/api/x", "", nil)
			second := serveRec(h, "GET", "/api/x", "", nil)
			want := 429 // the default, per client IP
			if !withDefault {
				want = 200 // nothing else applies: passed as unmatched
			}
			if first.Code != 200 || second.Code != want {
				t.Errorf("DryRun %v EnforcePercent %v, default %v: %d then %d, want 200 then %d", trial.DryRun != nil, trial.EnforcePercent != nil, withDefault, first.Code, second.Code, want)
			}
			if rs := m.RuleStats()[0]; rs.KeyErrors != 2 {
				t.Errorf("trial rule's RuleStats %+v, want 2 key errors", rs)
			}
		}
	}
}

// TestGlobalDryRunDecidesByTheFirstMatchAlone: under Options.DryRun no
// rule enforces any key, so no rule stands in for another: a request is
// decided (in shadow) by its first matching rule alone, and the default
// sees only the requests no rule matched, as without rules on trial.
func TestGlobalDryRunDecidesByTheFirstMatchAlone(t *testing.T) {
	clk := newClock()
	m := mustNew(t, Options{DryRun: true, Rules: []Rule{
		{Name: "a", PathPrefix: "/a", Engine: logConfig(1, time.Minute, clk)},
		{Name: "all", Engine: logConfig(1, time.Minute, clk)},
	}, Default: &Rule{Name: "default", Engine: logConfig(1, time.Minute, clk)}})
	h := m.Handler(okHandler)
	for i := range 3 {
		rec := serveRec(h, "GET", "/a", "", nil)
		if rec.Code != 200 || rec.Header().Get("RateLimit") != `"a";r=0;t=60` {
			t.Errorf("request %d: %d %q, want 200 decided by a alone", i, rec.Code, rec.Header().Get("RateLimit"))
		}
	}
	rs := m.RuleStats()
	if rs[1].Allowed+rs[1].DryRunDenied != 0 || rs[2].Allowed+rs[2].DryRunDenied != 0 {
		t.Errorf("RuleStats %+v: only a should have decided", rs)
	}
}
