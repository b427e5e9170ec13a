package main

import (
	"bufio"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

var (
	buildOnce sync.Once
	builtBin  string
	buildErr  error
)

// gatewayBinary builds cmd/gateway once per test binary run.
func gatewayBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		goBin, err := exec.LookPath("go")
		if err != nil {
			buildErr = err
			return
		}
		dir, err := os.MkdirTemp("", "gateway-test-")
		if err != nil {
			buildErr = err
			return
		}
		builtBin = filepath.Join(dir, "gateway")
		if out, err := exec.Command(goBin, "build", "-o", builtBin, ".").CombinedOutput(); err != nil {
			buildErr = errors.New(err.Error() + "\n" + string(out))
		}
	})
	if buildErr != nil {
		t.Fatalf("building the gateway: %v", buildErr)
	}
	return builtBin
}

// gatewayProc is a running gateway process: its base URL, its stdout and
// stderr lines as they come, and its exit.
type gatewayProc struct {
	t      *testing.T
	cmd    *exec.Cmd
	base   string
	debug  string
	out    chan string // stdout lines
	log    chan string // stderr lines (the JSON log)
	exited chan error
}

func startGatewayProc(t *testing.T, args ...string) *gatewayProc {
	t.Helper()
	cmd := exec.Command(gatewayBinary(t), args...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &gatewayProc{t: t, cmd: cmd, out: make(chan string, 256), log: make(chan string, 256), exited: make(chan error, 1)}
	var wg sync.WaitGroup
	wg.Add(2)
	pump := func(r io.Reader, ch chan string) {
		defer wg.Done()
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			ch <- sc.Text()
		}
		close(ch)
	}
	go pump(stdout, p.out)
	go pump(stderr, p.log)
	go func() {
		wg.Wait() // Wait closes the pipes: read them to the end first
		p.exited <- cmd.Wait()
	}()
	// On an early failure, do not leave the process behind.
	t.Cleanup(func() { _ = cmd.Process.Kill() })

	listenRe := regexp.MustCompile(`listening on (http://127\.0\.0\.1:\d+)`)
	debugRe := regexp.MustCompile(`debug endpoints on (http://127\.0\.0\.1:\d+)/`)
	deadline := time.After(failAfter)
	for p.base == "" {
		select {
		case l, ok := <-p.out:
			if !ok {
				t.Fatalf("gateway exited before listening; log:\n%s", drain(p.log))
			}
			if m := listenRe.FindStringSubmatch(l); m != nil {
				p.base = m[1]
			}
			if m := debugRe.FindStringSubmatch(l); m != nil {
				p.debug = m[1]
			}
		case <-deadline:
			t.Fatal("gateway did not report its address")
		}
	}
	return p
}

func drain(ch chan string) string {
	var b strings.Builder
	timeout := time.After(5 * time.Second)
	for {
		select {
		case l, ok := <-ch:
			if !ok {
				return b.String()
			}
			b.WriteString(l + "\n")
		case <-timeout:
			return b.String()
		}
	}
}

// waitLog waits for a log line containing every one of subs.
func (p *gatewayProc) waitLog(subs ...string) string {
	p.t.Helper()
	deadline := time.After(failAfter)
	for {
		select {
		case l, ok := <-p.log:
			if !ok {
				p.t.Fatalf("gateway log ended before a line with %q", subs)
			}
			match := true
			for _, s := range subs {
				match = match && strings.Contains(l, s)
			}
			if match {
				return l
			}
		case <-deadline:
			p.t.Fatalf("no log line with %q", subs)
		}
	}
}

func (p *gatewayProc) signal(s os.Signal) {
	p.t.Helper()
	if err := p.cmd.Process.Signal(s); err != nil {
		p.t.Fatal(err)
	}
}

// wait returns the exit status and the remaining stdout.
func (p *gatewayProc) wait() (int, string) {
	p.t.Helper()
	var rest []string
	for l := range p.out {
		rest = append(rest, l)
	}
	select {
	case err := <-p.exited:
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode(), strings.Join(rest, "\n")
		}
		if err != nil {
			p.t.Fatal(err)
		}
		return 0, strings.Join(rest, "\n")
	case <-time.After(failAfter):
		p.t.Fatal("gateway did not exit")
	}
	return -1, ""
}

// get sends GET and returns the status, RateLimit headers and body.
func get(t *testing.T, url string) (int, http.Header, string) {
	t.Helper()
	res, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(res.Body)
	res.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	return res.StatusCode, res.Header, string(body)
}

func writeFile(t *testing.T, path, s string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
		t.Fatal(err)
	}
}

func startCmd(t *testing.T, args ...string) *exec.Cmd {
	return exec.Command(gatewayBinary(t), args...)
}
