package httplimit

import (
	"errors"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/slidelimit/slidelimit/engine"
)

func TestObserveAndRuleStats(t *testing.T) {
	var mu sync.Mutex
	var evs []Event
	fail := &ctxLimiter{fixedLimiter: fixedLimiter{engine.Decision{Allowed: true, Limit: 9, Remaining: 8}}, err: errors.New("redis: i/o timeout")}
	m := mustNew(t, Options{
		Key: Header("X-Api-Key"),
		Rules: []Rule{
			{Name: "remote", PathPrefix: "/remote", Limiter: fail, Limit: 9, Window: time.Second},
		},
		Default: &Rule{Name: "d", Engine: logConfig(1, time.Minute, newClock())},
		Observe: func(_ *http.Request, e Event) { mu.Lock(); evs = append(evs, e); mu.Unlock() },
	})
	h := m.Handler(okHandler)
	k := map[string]string{"X-Api-Key": "a"}
	serveRec(h, "GET", "/", "", k)
	serveRec(h, "GET", "/", "", k)
	serveRec(h, "GET", "/", "", nil) // key error, fail closed
	serveRec(h, "GET", "/remote", "", k)
	want := []struct {
		rule string
		o    Outcome
		err  bool
	}{{"d", OutcomeAllowed, false}, {"d", OutcomeDenied, false}, {"d", OutcomeKeyError, true}, {"remote", OutcomeAllowed, true}}
	if len(evs) != len(want) {
		t.Fatalf("%d events, want %d: %+v", len(evs), len(want), evs)
	}
	for i, w := range want {
		e := evs[i]
		if e.Rule != w.rule || e.Outcome != w.o || (e.Err != nil) != w.err || e.Latency <= 0 {
			t.Errorf("event %d = %+v (%s), want %s %s err=%v and a latency", i, e, e.Outcome, w.rule, w.o, w.err)
		}
	}
	rs := m.RuleStats()
	wantRS := []RuleStats{{Rule: "remote", Allowed: 1, BackendErrors: 1}, {Rule: "d", Allowed: 1, Denied: 1, KeyErrors: 1}}
	if len(rs) != 2 || rs[0] != wantRS[0] || rs[1] != wantRS[1] {
		t.Errorf("RuleStats %+v, want %+v", rs, wantRS)
	}
	for o, s := range map[Outcome]string{OutcomeAllowed: "allowed", OutcomeDenied: "denied", OutcomeDryRunDenied: "dry_run_denied", OutcomeKeyError: "key_error", 9: "unknown"} {
		if o.String() != s {
			t.Errorf("Outcome(%d) = %q, want %q", o, o.String(), s)
		}
	}
}

// TestRuleStatsEnforcedNeverExceedsAllowedUnderConcurrentAdmissions: a
// rule wholly in shadow admits from several goroutines while RuleStats is
// read again and again: every read has ShadowAllowed <= Allowed, so the
// enforced cohort's Allowed (their difference) is never a wrapped
// subtraction near 2^64. (It may be a few above 0: a read misses the
// admissions that race with it, as the package doc says.)
func TestRuleStatsEnforcedNeverExceedsAllowedUnderConcurrentAdmissions(t *testing.T) {
	m := mustNew(t, Options{DryRun: true, Default: &Rule{Name: "d",
		Engine: engine.Config{Algorithm: engine.SlidingCounter, Limit: 1<<20 - 1, Window: time.Hour, Clock: newClock()}}})
	h := m.Handler(okHandler)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for g := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			remote := fmt.Sprintf("10.0.0.%d:1", g)
			for {
				select {
				case <-stop:
					return
				default:
				}
				serveRec(h, "GET", "/", remote, nil)
			}
		}()
	}
	defer func() {
		close(stop)
		wg.Wait()
	}()
	for i := range 50000 {
		rs := m.RuleStats()[0]
		if e := rs.Enforced(); rs.ShadowAllowed > rs.Allowed || e.Allowed > rs.Allowed {
			t.Fatalf("read %d: %+v: Enforced %+v, want ShadowAllowed <= Allowed (Enforced().Allowed not wrapped)", i, rs, e)
		}
	}
}
