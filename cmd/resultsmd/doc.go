// Command resultsmd turns measured benchmark output into RESULTS.md, and
// prints the ours-vs-peers ratio table for make compare. Nothing in its
// output is typed by hand: every figure is a median (with benchstat's 95%
// confidence interval where a spread is shown) of the results in the files
// it is given, the implementations' algorithms come from the peer-<impl>
// configuration lines the peer suite prints, and the peers' versions from
// `go list -m` in bench/peers.
//
// Usage:
//
//	resultsmd -ratio out/bench/peers.txt          # ratio table to stdout
//	resultsmd -o RESULTS.md [-label TEXT]         # the whole report
//
// A ratio is median(peer sec/op) / median(ours sec/op) in the same
// scenario of the same file: above 1 the peer is slower. Inputs that are
// missing are reported as missing, never filled in.
package main
