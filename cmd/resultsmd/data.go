package main

import (
	"bytes"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"sort"
	"strings"

	"golang.org/x/perf/benchfmt"
	"golang.org/x/perf/benchmath"
)

// Units as benchfmt tidies them.
const (
	unitTime    = "sec/op"
	unitAllowed = "allowed/op"
	unitHeap    = "heap-B/key"
	unitScan    = "gcscan-B/key"
	unitGC      = "gc-sec" // the benchmarks report gc-ns; benchfmt tidies ns to sec
	unitTracked = "tracked/key"
	unitAllocs  = "allocs/op"
	unitBytes   = "B/op"
	unitPerKey  = "sec/key" // AllowMany reports ns/key; benchfmt tidies ns to sec
)

type cell struct{ scenario, impl string }

// dataset is one benchmark file: samples per scenario, implementation and
// unit, with scenarios and implementations in the order first seen.
type dataset struct {
	scenarios []string
	impls     []string
	samples   map[cell]map[string][]float64
	config    map[string]string // file configuration (goos, cpu, peer-<impl>, ...)
}

// parse reads benchmark-format output. The "/impl=<name>" part of a name
// selects the implementation (impl "" when absent); the rest of the name,
// GOMAXPROCS suffix included, is the scenario.
func parse(r io.Reader, name string) (*dataset, error) {
	d := &dataset{samples: map[cell]map[string][]float64{}, config: map[string]string{}}
	seenS, seenI := map[string]bool{}, map[string]bool{}
	br := benchfmt.NewReader(r, name)
	for br.Scan() {
		res, ok := br.Result().(*benchfmt.Result)
		if !ok {
			continue // unit metadata, syntax errors in non-benchmark lines
		}
		for _, c := range res.Config {
			d.config[c.Key] = string(c.Value)
		}
		base, parts := res.Name.Parts()
		var sc strings.Builder
		sc.Write(base)
		impl := ""
		for _, p := range parts {
			if v, ok := bytes.CutPrefix(p, []byte("/impl=")); ok {
				impl = string(v)
				continue
			}
			sc.Write(p)
		}
		k := cell{sc.String(), impl}
		if !seenS[k.scenario] {
			seenS[k.scenario] = true
			d.scenarios = append(d.scenarios, k.scenario)
		}
		if !seenI[impl] {
			seenI[impl] = true
			d.impls = append(d.impls, impl)
		}
		m := d.samples[k]
		if m == nil {
			m = map[string][]float64{}
			d.samples[k] = m
		}
		for _, v := range res.Values {
			m[v.Unit] = append(m[v.Unit], v.Value)
		}
	}
	if err := br.Err(); err != nil {
		return nil, fmt.Errorf("resultsmd: reading %s: %w", name, err)
	}
	return d, nil
}

// split returns the scenarios of d for which in is true, and the others,
// as two datasets; each lists only the implementations it has results of,
// in d's order, and both keep d's configuration lines.
func (d *dataset) split(in func(scenario string) bool) (yes, no *dataset) {
	part := func(want bool) *dataset {
		p := &dataset{samples: map[cell]map[string][]float64{}, config: d.config}
		seenI := map[string]bool{}
		for _, sc := range d.scenarios {
			if in(sc) != want {
				continue
			}
			p.scenarios = append(p.scenarios, sc)
			for _, im := range d.impls {
				if m, ok := d.samples[cell{sc, im}]; ok {
					p.samples[cell{sc, im}] = m
					seenI[im] = true
				}
			}
		}
		for _, im := range d.impls {
			if seenI[im] {
				p.impls = append(p.impls, im)
			}
		}
		return p
	}
	return part(true), part(false)
}

func parseFile(path string) (*dataset, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("resultsmd: %w", err)
	}
	defer f.Close()
	return parse(f, path)
}

// summary is the median and benchstat's 95% confidence interval of one
// scenario/implementation/unit; ok is false when there is no sample.
func (d *dataset) summary(scenario, impl, unit string) (benchmath.Summary, int, bool) {
	vals := d.samples[cell{scenario, impl}][unit]
	if len(vals) == 0 {
		return benchmath.Summary{}, 0, false
	}
	// NewSample sorts the slice it is given: a copy, so that the stored
	// samples stay in file (round) order for the per-round pairings.
	s := benchmath.NewSample(slices.Clone(vals), &benchmath.DefaultThresholds)
	return benchmath.AssumeNothing.Summary(s, 0.95), len(vals), true
}

func (d *dataset) median(scenario, impl, unit string) (float64, bool) {
	s, _, ok := d.summary(scenario, impl, unit)
	return s.Center, ok
}

// peers returns the implementations other than ours, in file order.
func (d *dataset) peers(ours ...string) []string {
	var out []string
	for _, im := range d.impls {
		if im != "" && !contains(ours, im) {
			out = append(out, im)
		}
	}
	return out
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// has reports whether impl has a sample of unit in some scenario.
func (d *dataset) has(impl, unit string) bool {
	for _, sc := range d.scenarios {
		if len(d.samples[cell{sc, impl}][unit]) > 0 {
			return true
		}
	}
	return false
}

// scenariosWith returns the scenarios that have unit for some implementation.
func (d *dataset) scenariosWith(unit string) []string {
	var out []string
	for _, sc := range d.scenarios {
		for _, im := range d.impls {
			if len(d.samples[cell{sc, im}][unit]) > 0 {
				out = append(out, sc)
				break
			}
		}
	}
	return out
}

// implInfo is what a peer-<impl> configuration line says.
type implInfo struct{ algorithm, module, bound string }

func (d *dataset) implInfo(impl string) (implInfo, bool) {
	v, ok := d.config["peer-"+impl]
	if !ok {
		return implInfo{}, false
	}
	f := strings.Split(v, " | ")
	for len(f) < 3 {
		f = append(f, "")
	}
	return implInfo{strings.TrimSpace(f[0]), strings.TrimSpace(f[1]), strings.TrimSpace(f[2])}, true
}

// fmtTime formats seconds per op the way benchstat does (ns, µs, ms).
func fmtTime(sec float64) string {
	switch ns := sec * 1e9; {
	case ns < 1e3:
		return fmt.Sprintf("%.3gns", ns)
	case ns < 1e6:
		return fmt.Sprintf("%.3gµs", ns/1e3)
	case ns < 1e9:
		return fmt.Sprintf("%.3gms", ns/1e6)
	}
	return fmt.Sprintf("%.3gs", sec)
}

// fmtRatio formats peer/ours: "12.3×".
func fmtRatio(r float64) string {
	switch {
	case math.IsNaN(r) || math.IsInf(r, 0):
		return "—"
	case r >= 100:
		return fmt.Sprintf("%.0f×", r)
	case r >= 10:
		return fmt.Sprintf("%.1f×", r)
	}
	return fmt.Sprintf("%.2f×", r)
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
