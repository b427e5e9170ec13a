package main

import (
	"io"
	"math"
	"strings"
	"testing"
)

const sample = `# HELP slidelimit_gateway_decision_seconds x
# TYPE slidelimit_gateway_decision_seconds histogram
slidelimit_gateway_decision_seconds_bucket{rule="a",le="1e-06"} 10
slidelimit_gateway_decision_seconds_bucket{rule="a",le="2e-06"} 90
slidelimit_gateway_decision_seconds_bucket{rule="a",le="+Inf"} 100
slidelimit_gateway_decision_seconds_bucket{rule="b",le="1e-06"} 0
slidelimit_gateway_decision_seconds_bucket{rule="b",le="2e-06"} 0
slidelimit_gateway_decision_seconds_bucket{rule="b",le="+Inf"} 100
slidelimit_gateway_decision_seconds_sum{rule="a"} 0.001
`

func TestParseHistogramSumsRulesAndQuantiles(t *testing.T) {
	h, err := parseHistogram(sample, "slidelimit_gateway_decision_seconds")
	if err != nil {
		t.Fatal(err)
	}
	if h.count != 200 {
		t.Fatalf("count %v, want 200", h.count)
	}
	for _, c := range []struct{ q, want float64 }{{0.05, 1e-6}, {0.45, 2e-6}, {0.46, math.Inf(1)}, {0.99, math.Inf(1)}} {
		if got := h.quantile(c.q); got != c.want {
			t.Errorf("quantile(%v) = %v, want %v", c.q, got, c.want)
		}
	}
	if _, err := parseHistogram("other 1\n", "slidelimit_gateway_decision_seconds"); err == nil {
		t.Error("no series: accepted")
	}
	if _, err := parseHistogram(`slidelimit_gateway_decision_seconds_bucket{rule="a",le="x"} 1`+"\n", "slidelimit_gateway_decision_seconds"); err == nil {
		t.Error("bad le: accepted")
	}
}

func TestJudgeVerdicts(t *testing.T) {
	// Every decision within 2 us: p99 <= 2 us.
	const fast = `slidelimit_gateway_decision_seconds_bucket{rule="a",le="1e-06"} 10
slidelimit_gateway_decision_seconds_bucket{rule="a",le="2e-06"} 90
slidelimit_gateway_decision_seconds_bucket{rule="a",le="+Inf"} 90
`
	h, err := parseHistogram(fast, "slidelimit_gateway_decision_seconds")
	if err != nil {
		t.Fatal(err)
	}
	mk := func(p50 int64) *report {
		r := &report{}
		r.Steady.Sent, r.Steady.Latency.P50 = 1, p50
		return r
	}
	var sb strings.Builder
	if code := judge(&sb, mk(100_000), mk(300_000), h, 1e6, 2e6); code != 0 {
		t.Errorf("within both objectives: exit %d\n%s", code, sb.String())
	}
	if code := judge(io.Discard, mk(100_000), mk(3_000_000), h, 1e6, 2e6); code != 1 {
		t.Errorf("added p50 2.9ms over 2ms: exit %d, want 1", code)
	}
	if code := judge(io.Discard, mk(100_000), mk(300_000), h, 1000, 2e6); code != 1 {
		t.Errorf("decision p99 over 1us: exit %d, want 1", code)
	}
}
