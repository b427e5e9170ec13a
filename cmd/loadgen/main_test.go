package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/slidelimit/slidelimit/loadgen"
)

func TestBadFlagsExit2WithOneLine(t *testing.T) {
	for _, args := range [][]string{
		{"-mode", "closed", "-rate", "1000"},
		{"-mode", "sideways"},
		{"-dist", "pareto"},
		{"-dist", "hot", "-keys", "10"},
		{"-dist", "uniform", "-zipf-s", "1.5"},
		{"-zipf-s", "0.9"},
		{"-rate", "0"},
		{"-rate", "-5"},
		{"-duration", "0s"},
		{"-limit", "0"},
		{"-algo", "fifo"},
		{"-target", "http://10.1.2.3:8080/"},
		{"-target", "http://127.0.0.1:8080/", "-algo", "log"},
		{"-target", "http://127.0.0.1:8080/", "-limit", "10"},
		{"-header", "X-Key"},
		{"-pprof-allow-remote"},
		{"-pprof", "0.0.0.0:0"},
		{"extra-argument"},
	} {
		var stdout, stderr bytes.Buffer
		code := run(context.Background(), args, &stdout, &stderr)
		if code != exitUsage {
			t.Errorf("%v: exit %d, want %d (stderr %q)", args, code, exitUsage, stderr.String())
			continue
		}
		if msg := stderr.String(); strings.Count(msg, "\n") != 1 || !strings.HasPrefix(msg, "loadgen: ") {
			t.Errorf("%v: want one line starting with \"loadgen: \", got %q", args, msg)
		}
	}
}

func TestUnknownFlagExit2(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), []string{"-no-such-flag"}, &stdout, &stderr); code != exitUsage {
		t.Errorf("exit %d, want %d", code, exitUsage)
	}
}

// A short run writes both reports; its exit status is the verdict's (0, 1
// or 4: the latency objective depends on the machine, so any is valid).
func TestShortRunWritesReports(t *testing.T) {
	dir := t.TempDir()
	var stdout, stderr bytes.Buffer
	args := []string{"-q", "-warmup", "100ms", "-duration", "300ms", "-interval", "100ms", "-rate", "1000",
		"-dist", "hot", "-algo", "log", "-limit", "10", "-window", "100ms", "-out", dir, "-pprof", "127.0.0.1:0",
		"-md", filepath.Join(dir, "frag", "loadgen.md"), "-note", "engine test"}
	code := run(context.Background(), args, &stdout, &stderr)
	if code != exitPass && code != exitFail && code != exitInconclusive {
		t.Fatalf("exit %d; stderr %s", code, stderr.String())
	}
	out := stdout.String()
	if !strings.Contains(out, "VERDICT:") || !strings.Contains(out, "debug server on http://127.0.0.1:") {
		t.Errorf("output lacks the verdict or the debug server line:\n%s", out)
	}
	raw, err := os.ReadFile(filepath.Join(dir, "report.json"))
	if err != nil {
		t.Fatal(err)
	}
	var r struct {
		Command string `json:"command"`
		Pass    bool   `json:"pass"`
		Steady  struct {
			Sent, Allowed, Denied uint64
		} `json:"steady"`
	}
	if err := json.Unmarshal(raw, &r); err != nil {
		t.Fatal(err)
	}
	if r.Pass != (code == exitPass) || !strings.HasPrefix(r.Command, "loadgen -q") {
		t.Errorf("report pass %v, command %q, exit %d", r.Pass, r.Command, code)
	}
	if r.Steady.Sent == 0 || r.Steady.Sent != r.Steady.Allowed+r.Steady.Denied {
		t.Errorf("counts %+v", r.Steady)
	}
	md, err := os.ReadFile(filepath.Join(dir, "frag", "loadgen.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"## Load test", "(engine test)", "| latency p50 / p90 / p99 / p99.9 / max |", "| GC pause p99 / max", "| live heap start / end"} {
		if !strings.Contains(string(md), want) {
			t.Errorf("markdown fragment lacks %q:\n%s", want, md)
		}
	}
	if html, err := os.ReadFile(filepath.Join(dir, "report.html")); err != nil || !strings.Contains(string(html), "<svg") {
		t.Errorf("report.html: %v", err)
	}
}

func TestCommandLine(t *testing.T) {
	got := commandLine([]string{"-rate", "1000", "-note", "engine: abc def", "-target", "http://127.0.0.1:1/a b"})
	if want := `loadgen -rate 1000 -target "http://127.0.0.1:1/a b"`; got != want {
		t.Errorf("commandLine = %s, want %s", got, want)
	}
}

// TestServiceTimeMissExits1WithTheVerdictFirst: a limiter that misses its
// own service-time objective (1 ns: no call is that fast) fails with exit
// status 1, and the verdict is the first line of the output, before the
// figures and the table.
func TestServiceTimeMissExits1WithTheVerdictFirst(t *testing.T) {
	var stdout, stderr bytes.Buffer
	args := []string{"-q", "-warmup", "100ms", "-duration", "300ms", "-interval", "100ms", "-rate", "1000",
		"-service-p99", "1ns", "-heap-growth", "1000", "-out", ""}
	if code := run(context.Background(), args, &stdout, &stderr); code != exitFail {
		t.Fatalf("exit %d, want %d; stderr %s", code, exitFail, stderr.String())
	}
	lines := strings.Split(strings.TrimLeft(stdout.String(), "\n"), "\n")
	if !strings.HasPrefix(lines[0], "VERDICT: FAIL: the limiter missed limiter service time p99") {
		t.Errorf("first line %q, want the verdict", lines[0])
	}
	if last := lines[len(lines)-2]; last != "loadgen: FAIL (exit status 1)" {
		t.Errorf("last line %q, want the verdict with its exit status", last)
	}
}

// TestExitStatusOfEachOutcome: the documented exit statuses.
func TestExitStatusOfEachOutcome(t *testing.T) {
	for o, want := range map[loadgen.Outcome]int{
		loadgen.OutcomePass: 0, loadgen.OutcomeFail: 1, loadgen.OutcomeInconclusive: 4, loadgen.OutcomeIncomplete: 130,
	} {
		if got := exitCode(o); got != want {
			t.Errorf("%s: exit %d, want %d", o, got, want)
		}
	}
}
