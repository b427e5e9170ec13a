package main

import (
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
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
	if rc := stream(strings.NewReader(sample), &out, path, "unit", "", 0); rc != 1 {
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

// A row whose name and figures come in two output events counts
// once, a row cut off by the benchmark's end counts, and a skipped
// benchmark is a skip with its reason.
func TestBenchRowsSplitAndBenchmarkSkips(t *testing.T) {
	const in = `{"Action":"run","Package":"m/b","Test":"BenchmarkY"}
{"Action":"output","Package":"m/b","Test":"BenchmarkY","Output":"BenchmarkY/a=1-2   \t"}
{"Action":"output","Package":"m/b","Test":"BenchmarkY","Output":"       1\t       5.0 ns/op\n"}
{"Action":"output","Package":"m/b","Test":"BenchmarkY","Output":"BenchmarkY/a=2-2   \t       1\t       6.0 ns/op"}
{"Action":"pass","Package":"m/b","Test":"BenchmarkY"}
{"Action":"run","Package":"m/b","Test":"BenchmarkRedis"}
{"Action":"output","Package":"m/b","Test":"BenchmarkRedis","Output":"    bench_test.go:9: redistest: redis-server not found in PATH\n"}
{"Action":"output","Package":"m/b","Test":"BenchmarkRedis","Output":"--- SKIP: BenchmarkRedis\n"}
{"Action":"skip","Package":"m/b","Test":"BenchmarkRedis"}
{"Action":"pass","Package":"m/b","Elapsed":0.1}
`
	r := newResult("bench")
	for _, line := range strings.Split(strings.TrimSpace(in), "\n") {
		var e event
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatal(err)
		}
		r.add(e)
	}
	if r.benchmarks != 2 {
		t.Errorf("benchmark rows = %d, want 2", r.benchmarks)
	}
	if r.skip != 1 || len(r.skips["redistest: redis-server not found in PATH"]) != 1 {
		t.Errorf("skips = %d %v, want BenchmarkRedis with its reason", r.skip, r.skips)
	}
}

// TestStreamSaysWhatItWaitsForDuringASilence: a step whose go test prints
// nothing for longer than the tick gets a progress line naming the step,
// the packages done and the package whose tests are running; the step's
// line says what it does.
func TestStreamSaysWhatItWaitsForDuringASilence(t *testing.T) {
	pr, pw := io.Pipe()
	var out syncBuffer
	done := make(chan int)
	go func() {
		done <- stream(pr, &out, filepath.Join(t.TempDir(), "s.jsonl"), "unit-race", "every package under -race (usually 2 min)", 20*time.Millisecond)
	}()
	io.WriteString(pw, `{"Action":"start","Package":"m/a"}`+"\n"+`{"Action":"pass","Package":"m/a","Elapsed":0.1}`+"\n"+`{"Action":"start","Package":"m/slow"}`+"\n")
	// Wait (without a deadline: a busy machine may be slow) until the
	// ticker has spoken about the running package.
	for !strings.Contains(out.String(), "tests running in m/slow") {
		time.Sleep(10 * time.Millisecond)
	}
	io.WriteString(pw, `{"Action":"pass","Package":"m/slow","Elapsed":1}`+"\n")
	pw.Close()
	if rc := <-done; rc != 0 {
		t.Fatalf("stream rc %d", rc)
	}
	s := out.String()
	for _, want := range []string{"== unit-race: every package under -race (usually 2 min)\n", "   ... unit-race still running (", "): 1 package done, tests running in m/slow ("} {
		if !strings.Contains(s, want) {
			t.Errorf("output lacks %q:\n%s", want, s)
		}
	}
}

// syncBuffer is a strings.Builder safe for the stream's ticker and the test.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
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
