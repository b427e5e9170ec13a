package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"strconv"
	"time"
)

// probeResult is what `httpjudge probe` writes: service times of requests
// sent one at a time, alternately straight to the upstream and through
// the gateway, and the difference within each pair.
type probeResult struct {
	Pairs   int       `json:"pairs"`
	Errors  int       `json:"errors"`
	Direct  quantiles `json:"direct"`
	Gateway quantiles `json:"gateway"`
	// Added is the per-pair difference, gateway minus direct: the time the
	// gateway adds to one request under the same machine conditions.
	Added quantiles `json:"added"`
}

type quantiles struct {
	P50 time.Duration `json:"p50_ns"`
	P90 time.Duration `json:"p90_ns"`
	P99 time.Duration `json:"p99_ns"`
}

func quantilesOf(ds []time.Duration) quantiles {
	if len(ds) == 0 {
		return quantiles{}
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	at := func(q float64) time.Duration { return s[min(int(q*float64(len(s))), len(s)-1)] }
	return quantiles{P50: at(0.5), P90: at(0.9), P99: at(0.99)}
}

// runProbe is `httpjudge probe`. Each pair sends one request straight to
// the upstream and one through the gateway, in alternating order, over a
// kept-alive connection each, and times each call from sending it to the
// end of its body (its service time: no load-generator queue in it). A
// fresh key per pair keeps the gateway on its allowed path. Interleaving
// makes both requests of a pair meet the same machine, so the difference
// is the gateway's even when other work shares the cores.
func runProbe(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("httpjudge probe", flag.ContinueOnError)
	fs.SetOutput(stderr)
	direct := fs.String("direct", "", "the upstream's URL")
	through := fs.String("gateway", "", "the same resource's URL through the gateway")
	n := fs.Int("n", 2000, "pairs to send")
	header := fs.String("header", "X-API-Key", "header carrying the per-pair key")
	out := fs.String("out", "", "write the result as JSON here")
	if err := fs.Parse(args); err != nil {
		return exitBadInput
	}
	if *direct == "" || *through == "" || *out == "" || *n < 10 {
		fmt.Fprintln(stderr, "httpjudge probe: -direct, -gateway and -out are required, -n >= 10")
		return exitBadInput
	}
	res, err := probe(context.Background(), *direct, *through, *header, *n)
	if err != nil {
		fmt.Fprintln(stderr, "httpjudge probe:", err)
		return exitBadInput
	}
	b, _ := json.MarshalIndent(res, "", "  ")
	if err := os.WriteFile(*out, append(b, '\n'), 0o644); err != nil {
		fmt.Fprintln(stderr, "httpjudge probe:", err)
		return exitBadInput
	}
	fmt.Fprintf(stdout, "probe: %d pairs, service p50 direct %v, through the gateway %v, added (per pair) p50 %v p90 %v p99 %v, %d errors\n",
		res.Pairs, res.Direct.P50, res.Gateway.P50, res.Added.P50, res.Added.P90, res.Added.P99, res.Errors)
	return exitPass
}

func probe(ctx context.Context, direct, through, header string, n int) (*probeResult, error) {
	newClient := func() *http.Client {
		return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 1, DisableCompression: true}}
	}
	dc, gc := newClient(), newClient()
	call := func(c *http.Client, url, key string) (time.Duration, error) {
		req, err := http.NewRequestWithContext(ctx, "GET", url, nil)
		if err != nil {
			return 0, err
		}
		req.Header.Set(header, key)
		start := time.Now()
		res, err := c.Do(req)
		if err != nil {
			return 0, err
		}
		_, err = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		d := time.Since(start)
		if err == nil && res.StatusCode != http.StatusOK {
			err = fmt.Errorf("%s: %s", url, res.Status)
		}
		return d, err
	}
	// Warm both connections (and the gateway's upstream pool) up.
	for i := range 20 {
		if _, err := call(dc, direct, "probe-warm"); err != nil {
			return nil, fmt.Errorf("direct: %w", err)
		}
		if _, err := call(gc, through, "probe-warm-"+strconv.Itoa(i)); err != nil {
			return nil, fmt.Errorf("through the gateway: %w", err)
		}
	}
	res := &probeResult{}
	var ds, gs, added []time.Duration
	var firstErr error
	for i := range n {
		key := "probe-" + strconv.Itoa(i)
		var d, g time.Duration
		var derr, gerr error
		if i%2 == 0 {
			d, derr = call(dc, direct, key)
			g, gerr = call(gc, through, key)
		} else {
			g, gerr = call(gc, through, key)
			d, derr = call(dc, direct, key)
		}
		if err := errors.Join(derr, gerr); err != nil {
			res.Errors++
			if firstErr == nil {
				firstErr = err
			}
			continue
		}
		ds, gs, added = append(ds, d), append(gs, g), append(added, g-d)
	}
	if len(added) < n/2 {
		return nil, fmt.Errorf("%d of %d pairs failed, first: %w", res.Errors, n, firstErr)
	}
	res.Pairs = len(added)
	res.Direct, res.Gateway, res.Added = quantilesOf(ds), quantilesOf(gs), quantilesOf(added)
	return res, nil
}

func readProbe(path string) (*probeResult, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var p probeResult
	if err := json.Unmarshal(b, &p); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if p.Pairs == 0 {
		return nil, fmt.Errorf("%s: no pair measured", path)
	}
	return &p, nil
}
