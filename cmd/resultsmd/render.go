package main

import (
	"fmt"
	"io"
	"math"
	"strings"
)

const (
	oursCounter = "slidelimit-counter"
	oursLog     = "slidelimit-log"
	oursGCRA    = "slidelimit-gcra"
)

// ours are the engine's implementations in the peer suite, each the base
// of one ratio table; GCRA's peers by algorithm are x/time/rate (a token
// bucket, which GCRA computes in one word) and throttled (GCRA).
var ours = []string{oursCounter, oursLog, oursGCRA}

// oursMiddleware are httplimit over each engine algorithm in
// BenchmarkMiddleware; the others in those scenarios are peers'
// middlewares.
var oursMiddleware = []string{"httplimit-counter", "httplimit-log", "httplimit-gcra"}

// isMiddleware tells BenchmarkMiddleware's scenarios from the bare
// limiters' ones: they get their own section and tables.
func isMiddleware(scenario string) bool { return strings.HasPrefix(short(scenario), "Middleware/") }

func row(w io.Writer, cells ...string) {
	fmt.Fprintf(w, "| %s |\n", strings.Join(cells, " | "))
}

func header(w io.Writer, cells ...string) {
	row(w, cells...)
	sep := make([]string, len(cells))
	for i := range sep {
		sep[i] = "---"
	}
	row(w, sep...)
}

func short(scenario string) string { return strings.TrimPrefix(scenario, "Benchmark") }

// writeRatioTable writes, per scenario, ours' median time and each peer's
// median divided by ours, then the geometric mean of each peer's ratios.
// It returns the number of scenarios with a time for base.
func writeRatioTable(w io.Writer, d *dataset, base string) int {
	return writeRatioTableOf(w, d, base, d.peers(base))
}

// writeRatioTableOf is writeRatioTable with the columns given: peers, in
// that order.
func writeRatioTableOf(w io.Writer, d *dataset, base string, peers []string) int {
	cols := append([]string{"scenario", base + " (median)"}, peers...)
	header(w, cols...)
	logSum := make([]float64, len(peers))
	logN := make([]int, len(peers))
	n := 0
	for _, sc := range d.scenariosWith(unitTime) {
		b, ok := d.median(sc, base, unitTime)
		if !ok || b <= 0 {
			continue
		}
		n++
		cells := []string{short(sc), fmtTime(b)}
		for i, p := range peers {
			v, ok := d.median(sc, p, unitTime)
			if !ok {
				cells = append(cells, "—")
				continue
			}
			r := v / b
			logSum[i] += math.Log(r)
			logN[i]++
			cells = append(cells, fmtRatio(r))
		}
		row(w, cells...)
	}
	cells := []string{"**geomean**", ""}
	for i := range peers {
		if logN[i] == 0 {
			cells = append(cells, "—")
			continue
		}
		cells = append(cells, "**"+fmtRatio(math.Exp(logSum[i]/float64(logN[i])))+"**")
	}
	row(w, cells...)
	return n
}

// writeSummaryTable writes median ± 95% CI of unit for every scenario and
// implementation (benchstat's statistics, one column per implementation).
func writeSummaryTable(w io.Writer, d *dataset, unit string, format func(float64) string) {
	cols := []string{"scenario"}
	for _, im := range d.impls {
		cols = append(cols, orDefault(im, "value"))
	}
	header(w, cols...)
	for _, sc := range d.scenariosWith(unit) {
		cells := []string{short(sc)}
		for _, im := range d.impls {
			s, n, ok := d.summary(sc, im, unit)
			switch {
			case !ok:
				cells = append(cells, "—")
			case n < 2:
				cells = append(cells, format(s.Center)+" (n=1)")
			default:
				cells = append(cells, format(s.Center)+" "+s.PctRangeString())
			}
		}
		row(w, cells...)
	}
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func fmtFrac(v float64) string  { return fmt.Sprintf("%.3f", v) }
func fmtBytes(v float64) string { return fmt.Sprintf("%.1f", v) }

// writePerKeyTable writes the memory and GC figures of the many-keys
// scenarios: one row per population (the zipf run repeats the uniform
// run's population, so only uniform rows are shown) and implementation.
func writePerKeyTable(w io.Writer, d *dataset) {
	header(w, "population", "impl", "heap B/key", "GC-scannable B/key", "extra GC cycle time", "keys tracked")
	for _, sc := range d.scenariosWith(unitHeap) {
		if strings.Contains(sc, "/zipf") {
			continue
		}
		for _, im := range d.impls {
			h, ok := d.median(sc, im, unitHeap)
			if !ok {
				continue
			}
			s, _ := d.median(sc, im, unitScan)
			gc, _ := d.median(sc, im, unitGC)
			tracked := "—"
			if t, ok := d.median(sc, im, unitTracked); ok {
				tracked = fmt.Sprintf("%.1f%%", 100*t)
			}
			row(w, short(sc), orDefault(im, "slidelimit"), fmtBytes(h), fmtBytes(s), fmtTime(gc), tracked)
		}
	}
}

// writeAlgorithms writes the implementation table from the peer-<impl>
// configuration lines and the modules' versions.
func writeAlgorithms(w io.Writer, d *dataset, versions map[string]string) {
	header(w, "impl", "algorithm", "module", "version", "key bound")
	for _, im := range d.impls {
		info, ok := d.implInfo(im)
		if !ok {
			row(w, im, "(no peer- line in the output)", "", "", "")
			continue
		}
		v := versions[info.module]
		if v == "" {
			v = "(this repository)"
		}
		row(w, im, info.algorithm, info.module, v, info.bound)
	}
}

// writeRistrettoVerdict compares the ristretto-backed store with ours on
// speed and on how many keys it actually kept.
func writeRistrettoVerdict(w io.Writer, d *dataset) {
	const rc = "ristretto-counter"
	if !contains(d.impls, rc) {
		fmt.Fprintln(w, "The ristretto-backed store was not in this run.")
		return
	}
	faster, total := 0, 0
	var logSum float64
	for _, sc := range d.scenariosWith(unitTime) {
		o, ok1 := d.median(sc, oursCounter, unitTime)
		r, ok2 := d.median(sc, rc, unitTime)
		if !ok1 || !ok2 || o <= 0 {
			continue
		}
		total++
		logSum += math.Log(r / o)
		if r < o {
			faster++
		}
	}
	if total == 0 {
		fmt.Fprintln(w, "No scenario has both slidelimit-counter and ristretto-counter times.")
		return
	}
	minTracked := math.Inf(1)
	for _, sc := range d.scenariosWith(unitTracked) {
		if t, ok := d.median(sc, rc, unitTracked); ok {
			minTracked = math.Min(minTracked, t)
		}
	}
	geo := math.Exp(logSum / float64(total))
	fmt.Fprintf(w, "ristretto-counter (the same packed sliding counter, stored in a ristretto cache) was faster than slidelimit-counter in %d of %d scenarios; geometric mean time ratio ristretto/slidelimit = %s.", faster, total, fmtRatio(geo))
	if !math.IsInf(minTracked, 1) {
		fmt.Fprintf(w, " After populating the many-keys scenarios it kept as few as %.1f%% of the keys: ristretto's Set is asynchronous and its admission policy and full buffers drop new keys, which a rate limiter then decides as untracked (fail open).", 100*minTracked)
	}
	adopt := faster*2 > total && (math.IsInf(minTracked, 1) || minTracked >= 0.99)
	if adopt {
		fmt.Fprintln(w, " Verdict from these numbers: it wins on speed and keeps the keys, so it is worth adopting as the bounded store.")
	} else {
		fmt.Fprintln(w, " Verdict from these numbers: not adopted as the bounded store (it does not win on speed in most scenarios, or it does not keep the keys it is given).")
	}
}

// floorOf returns the BenchmarkFloor scenario that scenario sc of the
// engine suite is measured against: the same key count and distribution
// (or one hot key) on the heap floor table, and the same GOMAXPROCS suffix.
// ok is false for scenarios without one.
func floorOf(sc string) (string, bool) {
	name, procs, _ := strings.Cut(strings.TrimPrefix(sc, "Benchmark"), "-")
	parts := strings.Split(name, "/")
	if len(parts) < 3 || parts[0] != "Allow" && parts[0] != "AllowMany" {
		return "", false
	}
	rest := strings.Join(parts[2:], "/")
	if strings.HasPrefix(rest, "hot=") {
		rest = "hot"
	} else if !strings.HasPrefix(rest, "keys=") {
		return "", false
	}
	if parts[0] == "AllowMany" {
		rest = strings.Split(rest, "/batch=")[0]
	}
	f := "Floor/heap/" + rest
	if procs != "" {
		f += "-" + procs
	}
	return f, true
}

// writeFloorTable writes, for every engine scenario that has a floor in the
// same file, our median time, the floor's, and their ratio: how far a
// decision is from the memory floor (hash, probe, one CAS in a flat table
// of the same keys). It returns the number of rows.
func writeFloorTable(w io.Writer, d *dataset) int {
	n := 0
	for _, sc := range d.scenariosWith(unitTime) {
		f, ok := floorOf(sc)
		if !ok {
			continue
		}
		unit := unitTime
		if strings.HasPrefix(strings.TrimPrefix(sc, "Benchmark"), "AllowMany/") {
			unit = unitPerKey
		}
		ours, ok1 := d.median(sc, "", unit)
		floor, ok2 := d.median(f, "", unitTime)
		if !ok1 || !ok2 || floor <= 0 {
			continue
		}
		if n == 0 {
			header(w, "scenario", "ours (median)", "floor (median)", "ours / floor")
		}
		n++
		row(w, short(sc), fmtTime(ours), fmtTime(floor), fmtRatio(ours/floor))
	}
	return n
}
