package main

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// TestStateIsRestoredBeforeTheOverloadSamplerReadsTheLimiters: with
// overload protection on, its sampler reads every in-memory limiter's
// Stats each interval_ms; a limiter's ReadFrom swaps its tables in and no
// other call may run meanwhile, so the gateway restores the state before
// it starts the sampler. Run under -race: a sampler started first reads
// the tables the restore wrote, with nothing ordering the two.
func TestStateIsRestoredBeforeTheOverloadSamplerReadsTheLimiters(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "state")
	g, k, _ := stateGateway(t, stateYAML(file, "  state_interval_ms: -1\n"))
	spend(t, g, "/x", 4)
	// Enough keys that the restore spans several of the sampler's
	// intervals (the race needs a sample while the restore runs: once it
	// is done, its log line and the sampler's first order the two).
	for _, e := range g.cur.Load().engines {
		for i := range 20000 {
			e.Limiter.Allow("filler-" + strconv.Itoa(i))
		}
	}
	k.final()
	path := filepath.Join(dir, "gateway.yaml")
	cfg := stateYAML(file, "  state_interval_ms: -1\noverload: {interval_ms: 10, key_table_percent: 90}\n")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	up := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer up.Close()
	g2, _, ln, closeAll, err := start(flags{config: path, listen: "127.0.0.1:0", upstream: up.URL}, io.Discard, slog.New(slog.NewJSONHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer closeAll()
	defer ln.Close()
	// Wait for a sample, only reading what the sampler wrote: a write from
	// here would order the restore before the sampler's next reads and
	// hide the race.
	for gauge(t, g2.metrics, "slidelimit_gateway_overload_heap_live_bytes") == 0 {
		time.Sleep(time.Millisecond)
	}
	if got := admittedVia(g2, "/x", 5); got != 1 {
		t.Errorf("after the restart: %d admitted, want 1 (4 of 5 were used)", got)
	}
}
