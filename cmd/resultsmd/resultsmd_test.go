package main

import (
	"bytes"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// testdata/peers.txt is a hand-made fixture, not a measurement: the slow
// implementation's medians are 2x and 8x slidelimit-counter's.
func fixture(t *testing.T) *dataset {
	t.Helper()
	d, err := parseFile("testdata/peers.txt")
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestParseSplitsImplFromScenario(t *testing.T) {
	d := fixture(t)
	if got := strings.Join(d.scenarios, ","); got != "Allow/hot=allowed-2,Allow/keys=1M/uniform-2" {
		t.Errorf("scenarios = %s", got)
	}
	if got := strings.Join(d.impls, ","); got != "slidelimit-counter,slow" {
		t.Errorf("impls = %s", got)
	}
	if m, ok := d.median("Allow/hot=allowed-2", "slow", unitTime); !ok || math.Abs(m-22e-9) > 1e-15 {
		t.Errorf("median = %v, %v; want 22ns", m, ok)
	}
	info, ok := d.implInfo("slow")
	if !ok || info.algorithm != "a test fixture" || info.module != "example.com/slow" || info.bound != "unbounded" {
		t.Errorf("implInfo = %+v, %v", info, ok)
	}
}

func TestRatioTableIsPeerMedianOverOurs(t *testing.T) {
	var b bytes.Buffer
	if n := writeRatioTable(&b, fixture(t), oursCounter); n != 2 {
		t.Fatalf("%d scenarios, want 2", n)
	}
	out := b.String()
	for _, want := range []string{
		"| Allow/hot=allowed-2 | 11ns | 2.00× |",
		"| Allow/keys=1M/uniform-2 | 50ns | 8.00× |",
		"| **geomean** |  | **4.00×** |", // sqrt(2*8)
	} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in\n%s", want, out)
		}
	}
}

func TestPerKeyTableAndVerdict(t *testing.T) {
	var b bytes.Buffer
	d := fixture(t)
	writePerKeyTable(&b, d)
	if !strings.Contains(b.String(), "| Allow/keys=1M/uniform-2 | slidelimit-counter | 25.0 | 0.5 | 1ms | 100.0% |") {
		t.Errorf("per-key table:\n%s", b.String())
	}
	b.Reset()
	writeRistrettoVerdict(&b, d)
	if !strings.Contains(b.String(), "not in this run") {
		t.Errorf("verdict without ristretto: %s", b.String())
	}
}

func TestReportIncludesFragmentsVerbatimAndNamesMissingInputs(t *testing.T) {
	dir := t.TempDir()
	frags := filepath.Join(dir, "frags")
	if err := os.MkdirAll(frags, 0o755); err != nil {
		t.Fatal(err)
	}
	frag := "## Load test\n\nverdict: | odd | markdown `kept` as is\n"
	if err := os.WriteFile(filepath.Join(frags, "loadgen.md"), []byte(frag), 0o644); err != nil {
		t.Fatal(err)
	}
	in := filepath.Join(dir, "in")
	if err := os.MkdirAll(in, 0o755); err != nil {
		t.Fatal(err)
	}
	fx, err := os.ReadFile("testdata/peers.txt")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(in, "peers.txt"), fx, 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "RESULTS.md")
	if err := writeReport(out, in, frags, dir, "fixture"); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	for _, want := range []string{frag, "> **fixture**", "| slow | a test fixture | example.com/slow |", "engine.txt missing", "github.com/webriots/rate"} {
		if !strings.Contains(s, want) {
			t.Errorf("report lacks %q", want)
		}
	}
}

// Each engine scenario is set against the floor of the same keys and
// GOMAXPROCS; AllowMany by its time per key.
func TestFloorTable(t *testing.T) {
	d, err := parse(strings.NewReader(`goos: linux
BenchmarkAllow/counter/hot=allowed-2   	1000	50 ns/op
BenchmarkAllow/counter/keys=100k/uniform-2   	1000	300 ns/op
BenchmarkAllow/log/keys=1M/uniform-2   	1000	300 ns/op
BenchmarkAllowMany/counter/keys=100k/uniform/batch=16-2   	1000	3200 ns/op	200 ns/key
BenchmarkFloor/heap/hot-2   	1000	20 ns/op
BenchmarkFloor/heap/keys=100k/uniform-2   	1000	150 ns/op
`), "x")
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	if n := writeFloorTable(&b, d); n != 3 {
		t.Fatalf("%d rows:\n%s", n, b.String())
	}
	for _, want := range []string{"| Allow/counter/hot=allowed-2 | 50ns | 20ns | 2.50× |", "| Allow/counter/keys=100k/uniform-2 | 300ns | 150ns | 2.00× |", "| AllowMany/counter/keys=100k/uniform/batch=16-2 | 200ns | 150ns | 1.33× |"} {
		if !strings.Contains(b.String(), want) {
			t.Fatalf("missing %q in:\n%s", want, b.String())
		}
	}
}
