package loadgen

import (
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// TestEndLabelsDoNotOverlap: lines that end close together (p99.9 and max
// often do) get their labels moved at least labelGap apart, inside the chart.
func TestEndLabelsDoNotOverlap(t *testing.T) {
	c := newChart(0, 10, 1e3, 1e7)
	var b strings.Builder
	labels := []endLabel{
		{y: 100, text: "max"}, {y: 101, text: "p99.9"}, {y: 99, text: "p99"},
		{y: c.h - c.bottom, text: "p50"}, {y: c.h - c.bottom - 1, text: "objective"},
	}
	c.drawLabels(&b, labels)
	re := regexp.MustCompile(`<text x="[^"]+" y="([^"]+)"`)
	var ys []float64
	for _, m := range re.FindAllStringSubmatch(b.String(), -1) {
		y, err := strconv.ParseFloat(m[1], 64)
		if err != nil {
			t.Fatal(err)
		}
		ys = append(ys, y)
	}
	if len(ys) != len(labels) {
		t.Fatalf("%d labels drawn, want %d", len(ys), len(labels))
	}
	for i := 1; i < len(ys); i++ {
		if ys[i]-ys[i-1] < labelGap-0.1 { // %.1f rounding
			t.Errorf("labels %d and %d are %.1f px apart, want >= %d: %v", i-1, i, ys[i]-ys[i-1], labelGap, ys)
		}
	}
	if last := ys[len(ys)-1]; last > c.h-c.bottom+0.1 {
		t.Errorf("last label at y=%.1f, below the chart's bottom %.1f", last, c.h-c.bottom)
	}
}

// TestVerdictTableColumnsAligned: a long objective or measurement does not
// push the RESULT column out of line.
func TestVerdictTableColumnsAligned(t *testing.T) {
	r := &Result{Verdict: []Check{
		{Name: "p99 latency", Objective: "< 2ms", Measured: "180µs", Pass: true, Counted: true},
		{Name: "admitted within the rule's bound for every key", Objective: "<= Limit per window for each of 10000 keys", Measured: "10000 of 10000 keys within", Pass: true, Counted: true},
		{Name: "gc", Objective: "p99 < 5ms", Measured: "1.2ms", Counted: false, Note: "info only"},
	}}
	var b strings.Builder
	if err := r.WriteVerdict(&b); err != nil {
		t.Fatal(err)
	}
	var col []int
	text := b.String()
	text = text[strings.Index(text, "CHECK"):] // the table; the verdict comes first
	for _, line := range strings.Split(text, "\n") {
		for _, res := range []string{"RESULT", " PASS", " FAIL", " info"} {
			if i := strings.Index(line, res); i >= 0 && (strings.HasPrefix(line, "CHECK") || strings.Contains(line, "  ")) {
				if res != "RESULT" {
					i++
				}
				col = append(col, utf8.RuneCountInString(line[:i])) // columns are in runes (µs)
				break
			}
		}
	}
	if len(col) != 4 {
		t.Fatalf("found the RESULT column in %d lines, want 4 (header + 3 rows):\n%s", len(col), b.String())
	}
	for _, c := range col[1:] {
		if c != col[0] {
			t.Fatalf("RESULT column at offsets %v, want one column:\n%s", col, b.String())
		}
	}
}

// TestShortFinalIntervalIsNotPlotted: the run ends a few milliseconds after
// its last tick; that sliver is not a point of the series (its requests
// still count in the totals). Every other point spans at least half an
// Interval too: ticks come an Interval after the previous collection, so a
// late tick (a busy machine) is not followed by a short interval.
func TestShortFinalIntervalIsNotPlotted(t *testing.T) {
	c := testConfig()
	c.Warmup = 0
	c.Interval = 100 * time.Millisecond
	c.Duration = 505 * time.Millisecond // ends ~5 ms after the 5th tick
	r := mustRun(t, c)
	if len(r.Series) == 0 {
		t.Fatal("no series")
	}
	prev := 0.0
	for i, p := range r.Series {
		if span := p.TS - prev; span < c.Interval.Seconds()/2 {
			t.Errorf("point %d spans %.3fs, less than half the %v interval: %+v", i, span, c.Interval, r.Series)
		}
		prev = p.TS
	}
	var sent uint64
	for _, p := range r.Series {
		if p.Steady {
			sent += p.Allowed + p.Denied + p.Errors
		}
	}
	if sent > r.Steady.Sent {
		t.Errorf("series holds %d requests, more than the %d sent", sent, r.Steady.Sent)
	}
}
