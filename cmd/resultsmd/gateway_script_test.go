package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestSkippedGatewayBenchmarkLeavesNoStaleTable runs
// bench/gateway-vs-nginx.sh where it must skip (wrk is not on PATH, and
// apt-get, first on PATH, fails to install anything, so it skips whether
// or not the test runs as root). A table from an earlier run must not
// survive the skip: RESULTS.md would present the old figures, of another
// binary or another machine, as this run's. The report then says the
// gateway was not measured.
func TestSkippedGatewayBenchmarkLeavesNoStaleTable(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("SKIPPED: bash not found; the gateway benchmark script needs it")
	}
	bin := t.TempDir()
	// The only commands the script may find: id and rm (real), and an
	// apt-get that fails, so that no package is ever installed.
	for _, name := range []string{"id", "rm"} {
		p, err := exec.LookPath(name)
		if err != nil {
			t.Skipf("SKIPPED: %s not found: %v", name, err)
		}
		if err := os.Symlink(p, filepath.Join(bin, name)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(bin, "apt-get"), []byte("#!/bin/sh\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	dir := writeInput(t, map[string]string{"gateway.txt": "BenchmarkGateway/conns=1/impl=direct 1 25000 p50-ns 90000 p99-ns 40000 req/s\n" +
		"BenchmarkGateway/conns=1/impl=nginx 1 60000 p50-ns 150000 p99-ns 15000 req/s\n" +
		"BenchmarkGateway/conns=1/impl=gateway 1 90000 p50-ns 190000 p99-ns 12000 req/s\n"})
	out := filepath.Join(dir, "gateway.txt")
	script, err := filepath.Abs(filepath.Join("..", "..", "bench", "gateway-vs-nginx.sh"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bash, script, out)
	cmd.Env = append(os.Environ(), "PATH="+bin)
	msg, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the script failed instead of skipping: %v\n%s", err, msg)
	}
	if !strings.Contains(string(msg), "SKIPPED") {
		t.Fatalf("the script neither ran nor said it skipped:\n%s", msg)
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Fatalf("after a skipped run %s is still there (stat: %v): the report would show an earlier run's table as this one's", out, err)
	}
	var b strings.Builder
	writeGateway(&b, dir)
	if !strings.Contains(b.String(), "Not measured in this run") {
		t.Errorf("gateway section after a skip:\n%s", b.String())
	}
}
