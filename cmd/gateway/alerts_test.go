package main

import (
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestAlertRulesPassPromtool: alerts.yml is valid Prometheus rules
// (promtool check rules) and its unit tests pass (promtool test rules
// alerts_test.yml: for each alert, series that must fire it and series
// that must not). make test installs promtool (Debian's prometheus
// package) when it runs as root.
func TestAlertRulesPassPromtool(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool is not on PATH: alerts.yml is NOT checked (install Debian's prometheus package; make test does as root)")
	}
	for _, args := range [][]string{{"check", "rules", "alerts.yml"}, {"test", "rules", "alerts_test.yml"}} {
		out, err := exec.Command(promtool, args...).CombinedOutput()
		if err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// TestAlertRulesUseTheGatewaysMetricNames: every slidelimit_gateway_*
// metric alerts.yml and dashboard.json read is one the gateway exports (a
// renamed metric would leave its alert silent forever; promtool cannot
// see that). The gateway here has a Redis rule (its server unreachable,
// so its backend errors and breaker series exist) and the overload
// watcher with a sheddable rule.
func TestAlertRulesUseTheGatewaysMetricNames(t *testing.T) {
	metric := regexp.MustCompile(`slidelimit_gateway_[a-z0-9_]+`)
	b, err := os.ReadFile("alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	used := map[string][]string{} // metric -> the files reading it
	for _, line := range strings.Split(string(b), "\n") {
		if expr, ok := strings.CutPrefix(strings.TrimSpace(line), "expr:"); ok {
			for _, m := range metric.FindAllString(expr, -1) {
				used[m] = append(used[m], "alerts.yml")
			}
		}
	}
	var dash struct {
		Panels []struct {
			Targets []struct{ Expr string }
		}
	}
	if b, err = os.ReadFile("dashboard.json"); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("dashboard.json: %v", err)
	}
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			for _, m := range metric.FindAllString(tg.Expr, -1) {
				used[m] = append(used[m], "dashboard.json")
			}
		}
	}
	if len(used) < 12 {
		t.Fatalf("found only %v in alerts.yml's and dashboard.json's expressions", used)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there: the Redis rule's calls fail
	cfg := minimal + "  redis: {address: \"" + addr + "\", on_failure: open, timeout_ms: 2000}\n  rules:\n    - {name: shared, backend: redis}\n" +
		"overload: {sheddable: [shared]}\n"
	g, gw, _ := overloadGateway(t, cfg, okUpstream(t).URL, nil)
	do(t, "GET", gw.URL+"/", nil)
	g.overload.tick()
	exported := scrape(t, g)
	for name, files := range used {
		if !strings.Contains(exported, "\n# TYPE "+name+" ") {
			slices.Sort(files)
			t.Errorf("%s read %s, which the gateway does not export", strings.Join(slices.Compact(files), " and "), name)
		}
	}
}
