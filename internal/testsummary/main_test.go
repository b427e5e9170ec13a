package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// stream of a package with a pass, a skip with a reason, a failure, a
// benchmark row and a package that has no test files (go test -json shape).
const sample = `{"Action":"start","Package":"m/a"}
{"Action":"run","Package":"m/a","Test":"TestOK"}
{"Action":"output","Package":"m/a","Test":"TestOK","Output":"--- PASS: TestOK (0.00s)\n"}
{"Action":"pass","Package":"m/a","Test":"TestOK"}
{"Action":"run","Package":"m/a","Test":"TestRedis"}
{"Action":"output","Package":"m/a","Test":"TestRedis","Output":"=== RUN   TestRedis\n"}
{"Action":"output","Package":"m/a","Test":"TestRedis","Output":"    redis_test.go:12: redistest: redis-server not found in PATH\n"}
{"Action":"output","Package":"m/a","Test":"TestRedis","Output":"--- SKIP: TestRedis (0.00s)\n"}
{"Action":"skip","Package":"m/a","Test":"TestRedis"}
{"Action":"run","Package":"m/a","Test":"TestBad"}
{"Action":"output","Package":"m/a","Test":"TestBad","Output":"    a_test.go:3: got 2, want 1\n"}
{"Action":"fail","Package":"m/a","Test":"TestBad"}
{"Action":"run","Package":"m/a","Test":"BenchmarkX"}
{"Action":"output","Package":"m/a","Test":"BenchmarkX","Output":"BenchmarkX/keys=1k-2   \t       1\t       314.0 ns/op\n"}
{"Action":"fail","Package":"m/a","Elapsed":0.5}
{"Action":"output","Package":"m/empty","Output":"?   \tm/empty\t[no test files]\n"}
{"Action":"skip","Package":"m/empty"}
go: downloading example.com/x v1.0.0
`

func TestStreamAndFinal(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "unit.jsonl")
	var out strings.Builder
	if rc := stream(strings.NewReader(sample), &out, path, "unit"); rc != 1 {
		t.Fatalf("stream rc = %d, want 1 (a test failed)", rc)
	}
	for _, want := range []string{"--- FAIL m/a.TestBad", "got 2, want 1", "go: downloading", "FAILED"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("stream output lacks %q:\n%s", want, out.String())
		}
	}
	raw, err := os.ReadFile(path)
	if err != nil || string(raw) != sample {
		t.Fatalf("raw stream not kept verbatim (err %v)", err)
	}
	var sum strings.Builder
	if rc := final(&sum, []string{path}, 0, filepath.Join(dir, "no-notes")); rc != 1 {
		t.Fatalf("final rc = %d, want 1", rc)
	}
	s := sum.String()
	for _, want := range []string{
		"1 skipped: redistest: redis-server not found in PATH", "unit: m/a.TestRedis",
		"unit: m/a.TestBad", "tests: 1 passed, 2 failed, 1 skipped",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("summary lacks %q:\n%s", want, s)
		}
	}
}

func TestSkipReasonAndBenchRow(t *testing.T) {
	if got := skipReason([]string{"=== RUN   T\n", "    x_test.go:9: why: because\n", "--- SKIP: T (0.00s)\n"}); got != "why: because" {
		t.Errorf("skipReason = %q", got)
	}
	if got := skipReason(nil); got != "(no reason given)" {
		t.Errorf("skipReason(nil) = %q", got)
	}
	if !benchRow("BenchmarkAllow/counter/keys=100k-2   \t 1\t 50 ns/op\n") || benchRow("BenchmarkAllow\n") {
		t.Error("benchRow misclassifies")
	}
}
