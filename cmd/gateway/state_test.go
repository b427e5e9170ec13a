package main

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// stateYAML is a 5-per-10-minutes policy per client IP (a window no busy
// machine's restart comes near), with its state in file.
func stateYAML(file string, extra string) string {
	return fmt.Sprintf(`
rate_limiting:
  sliding_window:
    window_size_ms: 600000
    max_requests: 5
  algorithm: log
  key: ip
  rules:
    - name: login
      path_prefix: /login
      max_requests: 3
      algorithm: gcra
  state_file: %s
%s`, file, extra)
}

func TestStateConfigFieldsAreValidated(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct{ extra, want string }{
		{"  state_interval_ms: 50\n", "rate_limiting.state_interval_ms: must be in [100, "},
		{"  state_interval_ms: -2\n", "rate_limiting.state_interval_ms: must be in [100, "},
		{"  state_interval_ms: 1.5\n", "state_interval_ms"},
	} {
		_, err := parseConfig([]byte(stateYAML(filepath.Join(dir, "state"), c.extra)))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want an error with %q", c.extra, err, c.want)
		}
	}
	_, err := parseConfig([]byte(strings.Replace(minimal, "max_requests: 10\n", "max_requests: 10\n  state_interval_ms: 1000\n", 1)))
	if err == nil || !strings.Contains(err.Error(), "rate_limiting.state_interval_ms: is set but rate_limiting.state_file is not") {
		t.Errorf("an interval without a file: %v", err)
	}
	_, err = parseConfig([]byte(stateYAML(dir+"/", "")))
	if err == nil || !strings.Contains(err.Error(), "rate_limiting.state_file") {
		t.Errorf("a directory as the state file: %v", err)
	}
	for extra, want := range map[string]time.Duration{"": defaultStateInterval, "  state_interval_ms: -1\n": 0, "  state_interval_ms: 250\n": 250 * time.Millisecond} {
		c, err := parseConfig([]byte(stateYAML(filepath.Join(dir, "state"), extra)))
		if err != nil {
			t.Fatalf("%q: %v", extra, err)
		}
		if c.state.interval != want || c.state.file != filepath.Join(dir, "state") {
			t.Errorf("%q: %+v, want interval %v", extra, c.state, want)
		}
	}
}

// stateGateway builds a gateway from yamlCfg in front of an upstream that
// answers 200, restores its state and returns it with its keeper and log.
func stateGateway(t *testing.T, yamlCfg string) (*gateway, *stateKeeper, *syncBuffer) {
	t.Helper()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") }))
	t.Cleanup(up.Close)
	c, err := parseConfig([]byte(yamlCfg))
	if err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse(up.URL)
	var logBuf syncBuffer
	log := slog.New(slog.NewJSONHandler(&logBuf, nil))
	g := newGateway(u, log, nil)
	g.metrics = newMetrics(func() float64 { return 0 }, g)
	if err := g.load(c); err != nil {
		t.Fatal(err)
	}
	k, err := startState(c.state, g, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		k.close()
		g.close()
	})
	return g, k, &logBuf
}

// admittedVia counts what 192.0.2.1 gets through path before a refusal.
func admittedVia(g *gateway, path string, most int) int {
	for i := 0; i <= most; i++ {
		r := httptest.NewRequest(http.MethodGet, path, nil)
		r.RemoteAddr = "192.0.2.1:40000"
		w := httptest.NewRecorder()
		g.ServeHTTP(w, r)
		if w.Code != http.StatusOK {
			return i
		}
	}
	return most + 1
}

// spend sends n requests from 192.0.2.1 through path, each of which must
// be admitted.
func spend(t *testing.T, g *gateway, path string, n int) {
	t.Helper()
	for i := 0; i < n; i++ {
		r := httptest.NewRequest(http.MethodGet, path, nil)
		r.RemoteAddr = "192.0.2.1:40000"
		w := httptest.NewRecorder()
		g.ServeHTTP(w, r)
		if w.Code != http.StatusOK {
			t.Fatalf("%s request %d: %d", path, i, w.Code)
		}
	}
}

// gauge reads an unlabelled series from the gateway's registry.
func gauge(t *testing.T, m *metrics, name string) float64 {
	t.Helper()
	rec := httptest.NewRecorder()
	m.handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	for _, line := range strings.Split(rec.Body.String(), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			return f
		}
	}
	t.Fatalf("no series %s in /metrics", name)
	return 0
}

func TestStateWriteIsPrivateAtomicAndRestores(t *testing.T) {
	file := filepath.Join(t.TempDir(), "state")
	cfg := stateYAML(file, "  state_interval_ms: -1\n")
	g, k, _ := stateGateway(t, cfg)
	if v := testutilCounter(t, g.metrics, "slidelimit_gateway_state_restore", `outcome="absent"`); v != 1 {
		t.Errorf("restore outcome absent = %v on a first start", v)
	}
	spend(t, g, "/x", 4)
	spend(t, g, "/login", 2)
	before := time.Now()
	k.final()
	fi, err := os.Stat(file)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("state file mode %v, want 0600 (it holds the key-hash secrets)", fi.Mode().Perm())
	}
	if _, err := os.Stat(file + ".tmp"); !os.IsNotExist(err) {
		t.Errorf("the temporary file is left behind: %v", err)
	}
	if n := gauge(t, g.metrics, "slidelimit_gateway_state_last_write_bytes"); n != float64(fi.Size()) {
		t.Errorf("last write bytes %v, file size %d", n, fi.Size())
	}
	if ts := gauge(t, g.metrics, "slidelimit_gateway_state_last_write_timestamp_seconds"); ts < float64(before.Unix()) {
		t.Errorf("last write timestamp %v before the write at %v", ts, before.Unix())
	}
	if v := testutilCounter(t, g.metrics, "slidelimit_gateway_state_writes_total", `result="ok"`); v != 1 {
		t.Errorf("writes ok = %v, want 1", v)
	}

	g2, _, log := stateGateway(t, cfg)
	if !strings.Contains(log.String(), "state restored") {
		t.Errorf("no restore logged:\n%s", log.String())
	}
	if v := testutilCounter(t, g2.metrics, "slidelimit_gateway_state_restore", `outcome="restored"`); v != 1 {
		t.Errorf("restore outcome restored = %v", v)
	}
	if got := admittedVia(g2, "/x", 5); got != 1 {
		t.Errorf("the default rule after a restart: %d admitted, want 1 (4 of 5 were used)", got)
	}
	if got := admittedVia(g2, "/login", 3); got != 1 {
		t.Errorf("the gcra rule after a restart: %d admitted, want 1 (2 of 3 were used)", got)
	}
}

func TestStateWriteThatFailsLeavesThePreviousSnapshot(t *testing.T) {
	file := filepath.Join(t.TempDir(), "state")
	g, k, _ := stateGateway(t, stateYAML(file, "  state_interval_ms: -1\n"))
	spend(t, g, "/x", 4)
	if _, err := k.write(); err != nil {
		t.Fatal(err)
	}
	good, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	spend(t, g, "/x", 1)
	// A directory where the temporary file goes: the write cannot start.
	if err := os.Mkdir(file+".tmp", 0o700); err != nil {
		t.Fatal(err)
	}
	if _, err := k.write(); err == nil {
		t.Fatal("write succeeded with its temporary file blocked")
	}
	if now, err := os.ReadFile(file); err != nil || !bytes.Equal(now, good) {
		t.Errorf("a failed write changed the snapshot in place (err %v)", err)
	}
	if v := testutilCounter(t, g.metrics, "slidelimit_gateway_state_writes_total", `result="error"`); v != 1 {
		t.Errorf("writes error = %v, want 1", v)
	}
}

func TestUnrestorableStateIsSetAsideNeverOverwritten(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "state")
	junk := []byte("SLMWSNAP and then nothing a snapshot has")
	if err := os.WriteFile(file, junk, 0o600); err != nil {
		t.Fatal(err)
	}
	g, k, log := stateGateway(t, stateYAML(file, "  state_interval_ms: -1\n"))
	if v := testutilCounter(t, g.metrics, "slidelimit_gateway_state_restore", `outcome="failed"`); v != 1 {
		t.Errorf("restore outcome failed = %v", v)
	}
	if !strings.Contains(log.String(), "set aside") {
		t.Errorf("setting the snapshot aside is not logged:\n%s", log.String())
	}
	if got := admittedVia(g, "/x", 5); got != 5 {
		t.Errorf("after a failed restore: %d admitted, want 5 (empty)", got)
	}
	aside, _ := filepath.Glob(file + ".rejected-*")
	if len(aside) != 1 {
		t.Fatalf("set-aside files: %v, want one", aside)
	}
	if b, err := os.ReadFile(aside[0]); err != nil || !bytes.Equal(b, junk) {
		t.Errorf("the set-aside file is not the snapshot found (err %v)", err)
	}
	k.final()
	if b, err := os.ReadFile(aside[0]); err != nil || !bytes.Equal(b, junk) {
		t.Errorf("a write touched the set-aside snapshot (err %v)", err)
	}
	if _, err := os.Stat(file); err != nil {
		t.Errorf("no new snapshot after the write: %v", err)
	}
}

func TestStateOfAChangedRuleIsSkippedTheRestRestored(t *testing.T) {
	file := filepath.Join(t.TempDir(), "state")
	g, k, _ := stateGateway(t, stateYAML(file, "  state_interval_ms: -1\n"))
	spend(t, g, "/x", 4)
	spend(t, g, "/login", 2)
	k.final()
	changed := strings.Replace(stateYAML(file, "  state_interval_ms: -1\n"), "max_requests: 3", "max_requests: 4", 1)
	g2, _, log := stateGateway(t, changed)
	if v := testutilCounter(t, g2.metrics, "slidelimit_gateway_state_restore", `outcome="partial"`); v != 1 {
		t.Errorf("restore outcome partial = %v\n%s", v, log.String())
	}
	if !strings.Contains(log.String(), `\"login\"`) {
		t.Errorf("the log does not name the skipped rule:\n%s", log.String())
	}
	if got := admittedVia(g2, "/x", 5); got != 1 {
		t.Errorf("the unchanged default rule: %d admitted, want 1", got)
	}
	if got := admittedVia(g2, "/login", 4); got != 4 {
		t.Errorf("the changed login rule: %d admitted, want 4 (empty)", got)
	}
	if aside, _ := filepath.Glob(file + ".rejected-*"); len(aside) != 1 {
		t.Errorf("the partly restored snapshot was not kept aside: %v", aside)
	}
}

func TestStateFileInAMissingDirectoryStopsTheStart(t *testing.T) {
	c, err := parseConfig([]byte(stateYAML(filepath.Join(t.TempDir(), "no", "state"), "")))
	if err != nil {
		t.Fatal(err)
	}
	g := newGateway(nil, slog.New(slog.NewTextHandler(io.Discard, nil)), nil)
	g.metrics = newMetrics(func() float64 { return 0 }, g)
	if err := g.load(c); err != nil {
		t.Fatal(err)
	}
	defer g.close()
	if _, err := startState(c.state, g, g.log); err == nil || !strings.Contains(err.Error(), "rate_limiting.state_file") {
		t.Errorf("startState: %v, want an error naming rate_limiting.state_file", err)
	}
}

// procAdmitted counts what this client gets through the gateway process
// before a refusal.
func procAdmitted(t *testing.T, base string, most int) int {
	t.Helper()
	for i := 0; i <= most; i++ {
		if code, _, _ := get(t, base+"/x"); code != http.StatusOK {
			return i
		}
	}
	return most + 1
}

// TestRestartAfterSIGTERMKeepsEveryClientsCount: a client at 4 of 5 in
// the window gets 1 more after the gateway is stopped and started again,
// not 5: the shutdown writes the state once requests stopped, and the
// start restores it.
func TestRestartAfterSIGTERMKeepsEveryClientsCount(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "gateway.yaml")
	writeFile(t, cfg, stateYAML(filepath.Join(dir, "state"), "  state_interval_ms: -1\n"))
	args := []string{"-config", cfg, "-listen", "127.0.0.1:0", "-upstream", "builtin", "-pprof", "127.0.0.1:0"}
	p := startGatewayProc(t, args...)
	if got := procAdmitted(t, p.base, 3); got != 4 {
		t.Fatalf("before the restart: %d admitted, want 4 (the test takes 4)", got)
	}
	p.signal(syscall.SIGTERM)
	if code, _ := p.wait(); code != exitOK {
		t.Fatalf("exit %d after SIGTERM", code)
	}
	p = startGatewayProc(t, args...)
	_, _, metrics := get(t, p.debug+"/metrics")
	if !strings.Contains(metrics, `slidelimit_gateway_state_restore{outcome="restored"} 1`) {
		t.Errorf("/metrics does not say the state was restored:\n%s", grepLines(metrics, "state_restore"))
	}
	if got := procAdmitted(t, p.base, 5); got != 1 {
		t.Errorf("after the restart the client at 4 of 5 got %d more, want 1", got)
	}
	p.signal(syscall.SIGTERM)
	p.wait()
}

// TestSIGKILLLosesOnlyWhatCameAfterTheLastPeriodicWrite: killed without
// a shutdown, the gateway restarts from its last periodic snapshot. Once
// one interval has passed since the client's requests (the write after
// them completed), they all count after the restart.
func TestSIGKILLLosesOnlyWhatCameAfterTheLastPeriodicWrite(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "gateway.yaml")
	writeFile(t, cfg, stateYAML(filepath.Join(dir, "state"), "  state_interval_ms: 200\n"))
	args := []string{"-config", cfg, "-listen", "127.0.0.1:0", "-upstream", "builtin", "-pprof", "127.0.0.1:0"}
	p := startGatewayProc(t, args...)
	if got := procAdmitted(t, p.base, 3); got != 4 {
		t.Fatalf("before the kill: %d admitted, want 4", got)
	}
	after := float64(time.Now().UnixNano()) / 1e9
	deadline := time.Now().Add(failAfter)
	for {
		_, _, m := get(t, p.debug+"/metrics")
		if ts := seriesValue(m, "slidelimit_gateway_state_last_write_timestamp_seconds"); ts > after {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no periodic write after the requests:\n%s", grepLines(m, "state_"))
		}
		time.Sleep(50 * time.Millisecond)
	}
	p.signal(syscall.SIGKILL)
	p.wait()
	p = startGatewayProc(t, args...)
	if got := procAdmitted(t, p.base, 5); got != 1 {
		t.Errorf("after SIGKILL and a restart the client at 4 of 5 got %d more, want 1", got)
	}
	p.signal(syscall.SIGTERM)
	p.wait()
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// seriesValue is an unlabelled series' value in a /metrics body, or -1.
func seriesValue(body, name string) float64 {
	for _, l := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(l, name+" "); ok {
			if f, err := strconv.ParseFloat(v, 64); err == nil {
				return f
			}
		}
	}
	return -1
}

// TestPeriodicStateWritesRunBesideRequestsAndReloads (run it under
// -race): snapshots written every 100 ms while requests are decided and
// the configuration is reloaded each restore whole.
func TestPeriodicStateWritesRunBesideRequestsAndReloads(t *testing.T) {
	file := filepath.Join(t.TempDir(), "state")
	cfg := stateYAML(file, "  state_interval_ms: 100\n")
	g, k, _ := stateGateway(t, cfg)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			r := httptest.NewRequest(http.MethodGet, "/x", nil)
			r.RemoteAddr = "198.51.100." + strconv.Itoa(i%250) + ":40000"
			g.ServeHTTP(httptest.NewRecorder(), r)
		}
	}()
	for writes := 0.0; writes < 3; {
		c, err := parseConfig([]byte(cfg))
		if err != nil {
			t.Fatal(err)
		}
		if err := g.load(c); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
		writes = testutilCounter(t, g.metrics, "slidelimit_gateway_state_writes_total", `result="ok"`)
	}
	close(stop)
	<-done
	if v := testutilCounter(t, g.metrics, "slidelimit_gateway_state_writes_total", `result="error"`); v != 0 {
		t.Errorf("%v periodic writes failed", v)
	}
	k.final()
	g2, _, log := stateGateway(t, cfg)
	if v := testutilCounter(t, g2.metrics, "slidelimit_gateway_state_restore", `outcome="restored"`); v != 1 {
		t.Errorf("the last snapshot does not restore whole:\n%s", log.String())
	}
}

// TestReloadThatMovesTheStateFileIsLoggedAndIgnored: state_file and
// state_interval_ms are read at start; a reload that changes them says so
// and the state keeps its file.
func TestReloadThatMovesTheStateFileIsLoggedAndIgnored(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "state")
	g, _, log := stateGateway(t, stateYAML(file, "  state_interval_ms: 100\n"))
	c, err := parseConfig([]byte(stateYAML(filepath.Join(dir, "elsewhere"), "  state_interval_ms: 100\n")))
	if err != nil {
		t.Fatal(err)
	}
	if err := g.load(c); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(failAfter)
	for !strings.Contains(log.String(), "change only at restart") {
		if time.Now().After(deadline) {
			t.Fatalf("no warning about the moved state file:\n%s", log.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	for testutilCounter(t, g.metrics, "slidelimit_gateway_state_writes_total", `result="ok"`) < 1 {
		if time.Now().After(deadline) {
			t.Fatal("no periodic write")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, err := os.Stat(file); err != nil {
		t.Errorf("the state is not written to the file it started with: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "elsewhere")); !os.IsNotExist(err) {
		t.Errorf("a reload moved the state file: %v", err)
	}
}
