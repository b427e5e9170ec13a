package main

import (
	"fmt"
	"io"
)

// writeMiddleware writes the HTTP middleware section: httplimit against
// the peers' middlewares (BenchmarkMiddleware in peers.txt, the same
// rounds as the bare limiters), one ratio table per httplimit backend
// whose columns are the peers only, then times, allowed fractions and
// allocations of every middleware. mw nil or empty: the section says it
// was not measured.
func writeMiddleware(w io.Writer, mw *dataset, peersDir string) {
	fmt.Fprintln(w, "## HTTP middleware vs peers")
	fmt.Fprintln(w)
	if mw == nil || len(mw.scenarios) == 0 {
		fmt.Fprintln(w, "Not measured in this run (no BenchmarkMiddleware results in peers.txt).")
		fmt.Fprintln(w)
		return
	}
	fmt.Fprintln(w, "Each middleware wraps the same handler (sets Content-Type, writes 3 bytes) and keys by the client IP of RemoteAddr; a request is served into a reused ResponseWriter whose header map is cleared between requests, so the figures are the middleware's own cost (key, decision, headers, refusal body). `key=one`: one client, under its limit (`allowed`) or over it (`denied`, every request refused); `keys=10k`: 10,000 clients in uniform turn, each seen before the run. A ratio is median(peer) / median(httplimit) in the same rounds; above 1 the peer is slower.")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "### Middlewares")
	fmt.Fprintln(w)
	writeAlgorithms(w, mw, versions(peersDir, mw))
	fmt.Fprintln(w)
	peers := mw.peers(oursMiddleware...)
	for _, base := range oursMiddleware {
		if !mw.has(base, unitTime) {
			continue
		}
		fmt.Fprintf(w, "### Ratio: peer middleware time / %s time\n\n", base)
		writeRatioTableOf(w, mw, base, peers)
		fmt.Fprintln(w)
	}
	fmt.Fprintln(w, "### Time per request (median ± 95% CI)")
	fmt.Fprintln(w)
	writeSummaryTable(w, mw, unitTime, fmtTime)
	fmt.Fprintln(w)
	fmt.Fprintln(w, "### Allocations per request (median allocs/op)")
	fmt.Fprintln(w)
	writeSummaryTable(w, mw, unitAllocs, fmtBytes)
	fmt.Fprintln(w)
	fmt.Fprintln(w, "### Bytes allocated per request (median B/op)")
	fmt.Fprintln(w)
	writeSummaryTable(w, mw, unitBytes, fmtBytes)
	fmt.Fprintln(w)
	fmt.Fprintln(w, "### Allowed fraction (median allowed/op)")
	fmt.Fprintln(w)
	writeSummaryTable(w, mw, unitAllowed, fmtFrac)
	fmt.Fprintln(w)
}
