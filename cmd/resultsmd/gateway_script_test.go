//go:build unix

package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// TestSkippedGatewayBenchmarkLeavesNoStaleTable runs
// bench/gateway-vs-nginx.sh where it must skip (wrk is not on PATH, and
// the user, as id tells it, is not root). A table from an earlier run must not
// survive the skip: RESULTS.md would present the old figures, of another
// binary or another machine, as this run's. The report then says the
// gateway was not measured.
func TestSkippedGatewayBenchmarkLeavesNoStaleTable(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("SKIPPED: bash not found; the gateway benchmark script needs it")
	}
	bin := t.TempDir()
	// The only commands the script may find: rm (real), an id that says
	// the user is not root (so that nothing is installed, nor any system
	// file touched, whoever runs the test), and an apt-get that fails.
	p, err := exec.LookPath("rm")
	if err != nil {
		t.Skipf("SKIPPED: rm not found: %v", err)
	}
	if err := os.Symlink(p, filepath.Join(bin, "rm")); err != nil {
		t.Fatal(err)
	}
	for name, body := range map[string]string{"id": "#!/bin/sh\necho 1000\n", "apt-get": "#!/bin/sh\nexit 1\n"} {
		if err := os.WriteFile(filepath.Join(bin, name), []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
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

// TestGatewayBenchmarkStopsAGatewayThatNeverStarts: a gateway that does
// not say it is listening within START_TIMEOUT fails the run, and the
// script must stop it on the way out like every other process it
// started, not leave it running (holding its port, its CPU, its state
// file). Needs nginx and wrk (the script starts nginx before the gateway);
// without them the test skips loudly.
func TestGatewayBenchmarkStopsAGatewayThatNeverStarts(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("SKIPPED: bash not found; the gateway benchmark script needs it")
	}
	if _, err := exec.LookPath("wrk"); err != nil {
		t.Skip("SKIPPED: wrk is not installed (apt-get install wrk); the script would try to install it")
	}
	if _, err := exec.LookPath("nginx"); err != nil {
		if _, err := os.Stat("/usr/sbin/nginx"); err != nil {
			t.Skip("SKIPPED: nginx is not installed (apt-get install nginx); the script would try to install it")
		}
	}
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "gateway.pid")
	// A gateway that starts and never listens.
	fake := filepath.Join(dir, "gateway")
	if err := os.WriteFile(fake, []byte("#!/bin/sh\necho $$ > '"+pidFile+"'\nexec sleep 300\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	// An apt-get that fails, first on PATH: nothing may be installed.
	bin := filepath.Join(dir, "bin")
	if err := os.Mkdir(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bin, "apt-get"), []byte("#!/bin/sh\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	script, err := filepath.Abs(filepath.Join("..", "..", "bench", "gateway-vs-nginx.sh"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bash, script, filepath.Join(dir, "gateway.txt"))
	cmd.Env = append(os.Environ(), "PATH="+bin+":"+os.Getenv("PATH"), "GATEWAY_BIN="+fake, "START_TIMEOUT=1", "TMPDIR="+dir)
	msg, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("the run succeeded with a gateway that never listened:\n%s", msg)
	}
	if !strings.Contains(string(msg), "did not start") {
		t.Fatalf("the run failed, but not on the gateway's start:\n%s", msg)
	}
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatalf("the fake gateway never ran: %v\n%s", err, msg)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	if syscall.Kill(pid, 0) == nil {
		_ = syscall.Kill(pid, syscall.SIGKILL)
		t.Errorf("the gateway (pid %d) is still running after the script exited", pid)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, "gateway-vs-nginx.*")); len(left) > 0 {
		t.Errorf("temporary directories left behind: %v", left)
	}
}

// TestGatewayBenchmarkInstallStartsNoSystemNginx: Debian's nginx package
// starts its service as it installs (a default site on port 80 of every
// interface) and enables it at boot. When the script installs nginx, no
// such service may start or stay enabled: the benchmark's own nginx is on
// loopback only and stops with the run. The script runs as root in a user
// and mount namespace whose /usr/sbin is an empty tmpfs (no nginx, no
// policy-rc.d; nothing written there reaches the host), with an apt-get
// that records whether a service start would have been refused and then
// "installs" a stand-in nginx, and a systemctl that records its calls.
// Without user namespaces (unshare) the test skips loudly.
func TestGatewayBenchmarkInstallStartsNoSystemNginx(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("SKIPPED: bash not found; the gateway benchmark script needs it")
	}
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		t.Skip("SKIPPED: unshare not found; the test needs a user and mount namespace")
	}
	if out, err := exec.Command(unshare, "-r", "-m", "sh", "-c", "mount -t tmpfs none /usr/sbin").CombinedOutput(); err != nil {
		t.Skipf("SKIPPED: no user and mount namespace with a tmpfs here (%v: %s)", err, out)
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	if err := os.Mkdir(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	log := filepath.Join(dir, "calls.log")
	files := map[string]string{
		// Records what a maintainer script's service start would get from
		// policy-rc.d (101: refused; none: no policy, it would start), then
		// puts a stand-in nginx on PATH that cannot serve.
		"apt-get": "#!/bin/sh\n" +
			"p=none; if [ -x /usr/sbin/policy-rc.d ]; then /usr/sbin/policy-rc.d nginx start; p=$?; fi\n" +
			"echo \"apt-get $* policy=$p\" >> '" + log + "'\n" +
			"printf '#!/bin/sh\\n[ \"$1\" = -v ] && echo nginx version: nginx/stand-in >&2 && exit 0\\nexit 1\\n' > '" + bin + "/nginx'\n" +
			"chmod 755 '" + bin + "/nginx'\n",
		"systemctl": "#!/bin/sh\necho \"systemctl $*\" >> '" + log + "'\n",
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(bin, name), []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	script, err := filepath.Abs(filepath.Join("..", "..", "bench", "gateway-vs-nginx.sh"))
	if err != nil {
		t.Fatal(err)
	}
	inner := "mount -t tmpfs none /usr/sbin || exit 99; " + bash + " '" + script + "' '" + filepath.Join(dir, "gateway.txt") + "'; " +
		"if [ -e /usr/sbin/policy-rc.d ]; then echo policy-rc.d left behind >> '" + log + "'; fi"
	cmd := exec.Command(unshare, "-r", "-m", bash, "-c", inner)
	cmd.Env = append(os.Environ(), "PATH="+bin+":"+os.Getenv("PATH"), "GATEWAY_BIN=/bin/true", "TMPDIR="+dir)
	msg, _ := cmd.CombinedOutput() // the stand-in nginx cannot serve: the run fails after the install
	b, err := os.ReadFile(log)
	if err != nil {
		t.Fatalf("the script installed nothing: %v\n%s", err, msg)
	}
	calls := string(b)
	if !strings.Contains(calls, "apt-get install") {
		t.Fatalf("no install:\n%s\n%s", calls, msg)
	}
	if !strings.Contains(calls, "policy=101") {
		t.Errorf("during the install a service start was not refused (Debian's nginx would start on port 80 of every interface):\n%s", calls)
	}
	if strings.Contains(calls, "policy-rc.d left behind") {
		t.Errorf("the install's policy-rc.d was left behind (no service on this host would start again):\n%s", calls)
	}
	if !strings.Contains(calls, "systemctl disable nginx.service") {
		t.Errorf("the nginx service the install enabled at boot was not disabled:\n%s", calls)
	}
}
