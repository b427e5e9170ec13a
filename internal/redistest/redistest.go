package redistest

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Server is one redis-server process owned by a test.
type Server struct {
	tb    testing.TB
	bin   string
	dir   string
	port  int
	extra []string // more redis-server arguments (cluster mode, replicaof)
	conf  string   // a config file that replaces the flags (sentinel mode)
	env   []string // more environment for the process (the clock-skew library)

	mu     sync.Mutex
	cmd    *exec.Cmd
	paused bool
}

// readyTimeout bounds how long Start and Restart wait for PING. It is a
// guard against a hung child, not a speed assertion.
const readyTimeout = 10 * time.Second

// Start launches redis-server on 127.0.0.1 with a free high port and stops it
// when the test ends. It skips tb when no redis-server binary is installed.
func Start(tb testing.TB) *Server {
	tb.Helper()
	return start(tb, nil)
}

// StartWith is Start with more redis-server arguments (for example
// "--maxmemory", "10mb", "--maxmemory-policy", "allkeys-lru").
func StartWith(tb testing.TB, args ...string) *Server {
	tb.Helper()
	return start(tb, func(int) []string { return args })
}

func start(tb testing.TB, extra func(port int) []string) *Server {
	tb.Helper()
	return startWith(tb, func(s *Server) {
		if extra != nil {
			s.extra = extra(s.port)
		}
	})
}

func startWith(tb testing.TB, setup func(*Server)) *Server {
	tb.Helper()
	bin := lookPath(tb, "redis-server")
	port, err := freePort()
	if err != nil {
		tb.Fatalf("redistest: find a free port: %v", err)
	}
	s := &Server{tb: tb, bin: bin, dir: tb.TempDir(), port: port}
	setup(s)
	if err := s.start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(s.Kill)
	return s
}

// lookPath finds a binary of Debian's redis-server package or skips tb,
// saying how to install it.
func lookPath(tb testing.TB, name string) string {
	tb.Helper()
	bin, err := exec.LookPath(name)
	if err != nil {
		tb.Skipf("redistest: %s not found in PATH; install it with `apt-get install redis-server` (make test does this through mk/redis.mk when it runs as root)", name)
	}
	return bin
}

// Addr is host:port of the server.
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// Port is the server's port.
func (s *Server) Port() int { return s.port }

// Kill stops the server at once (SIGKILL) and waits for it to exit. Calling
// it on a stopped server does nothing.
func (s *Server) Kill() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill() // SIGKILL also ends a SIGSTOPped process
	_ = s.cmd.Wait()         // reaps the child; the error is the kill signal
	s.cmd = nil
	s.paused = false
}

// Pause stops the server process with SIGSTOP: it keeps its sockets, the
// kernel keeps accepting connections and buffering what clients send, and
// nothing is answered until Resume. This is a stalled server with requests
// already in its socket (a long fork, a swapping host, a debugger). The
// server is resumed when the test ends if the test does not.
func (s *Server) Pause() {
	s.tb.Helper()
	s.signal(syscall.SIGSTOP, true)
}

// Resume continues a paused server (SIGCONT): it then reads and runs, in
// order, whatever was sent to it meanwhile.
func (s *Server) Resume() {
	s.tb.Helper()
	s.signal(syscall.SIGCONT, false)
}

func (s *Server) signal(sig syscall.Signal, paused bool) {
	s.tb.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		s.tb.Fatalf("redistest: %v to a server that is not running", sig)
	}
	if err := s.cmd.Process.Signal(sig); err != nil {
		s.tb.Fatalf("redistest: %v: %v", sig, err)
	}
	if paused && !s.paused {
		s.tb.Cleanup(func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			if s.cmd != nil && s.paused {
				_ = s.cmd.Process.Signal(syscall.SIGCONT)
				s.paused = false
			}
		})
	}
	s.paused = paused
}

// Restart starts a fresh, empty server on the same port (after Kill, or
// killing the running one first) and waits for PING.
func (s *Server) Restart() {
	s.tb.Helper()
	s.Kill()
	if err := s.start(); err != nil {
		s.tb.Fatal(err)
	}
}

func (s *Server) start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	args := []string{
		"--bind", "127.0.0.1",
		"--port", strconv.Itoa(s.port),
		"--save", "",
		"--appendonly", "no",
		"--dir", s.dir,
		"--protected-mode", "yes",
		"--loglevel", "warning",
	}
	args = append(args, s.extra...)
	if s.conf != "" {
		// Sentinel mode: the config file must be the first argument (the
		// sentinel rewrites it), and it carries port, bind and dir.
		args = []string{s.conf, "--sentinel"}
	}
	cmd := exec.Command(s.bin, args...)
	if len(s.env) > 0 {
		cmd.Env = append(os.Environ(), s.env...)
	}
	var out strings.Builder
	cmd.Stdout = &out
	cmd.Stderr = &out
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("redistest: start %s: %w", s.bin, err)
	}
	if err := waitReady(s.Addr(), cmd, &out); err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return err
	}
	s.cmd = cmd
	return nil
}

// waitReady polls PING until it answers, the child exits or readyTimeout
// passes.
func waitReady(addr string, cmd *exec.Cmd, out *strings.Builder) error {
	deadline := time.Now().Add(readyTimeout)
	for {
		err := ping(addr)
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redistest: %s on %s did not answer PING within %v: %v; output: %s", cmd.Path, addr, readyTimeout, err, out.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// ping speaks just enough RESP to check the server is up, so the helper does
// not depend on a client library.
func ping(addr string) error {
	r, err := Do(addr, "PING")
	if err != nil {
		return err
	}
	if r != "PONG" {
		return fmt.Errorf("PING answered %q", r)
	}
	return nil
}

// Do sends one command to addr on a fresh connection and returns its reply:
// a simple string or integer as its text, a bulk string as its bytes; an
// error reply becomes an error. It is for setup and checks in tests (no
// client library here); arrays are not supported.
func Do(addr string, args ...string) (string, error) {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := c.Write([]byte(b.String())); err != nil {
		return "", err
	}
	rd := bufio.NewReader(c)
	line, err := rd.ReadString('\n')
	if err != nil {
		return "", err
	}
	line = strings.TrimSuffix(line, "\r\n")
	if line == "" {
		return "", fmt.Errorf("empty reply")
	}
	switch line[0] {
	case '+', ':':
		return line[1:], nil
	case '-':
		return "", fmt.Errorf("%s", line[1:])
	case '$':
		n, err := strconv.Atoi(line[1:])
		if err != nil || n < 0 {
			return "", err
		}
		buf := make([]byte, n+2)
		if _, err := ioReadFull(rd, buf); err != nil {
			return "", err
		}
		return string(buf[:n]), nil
	}
	return "", fmt.Errorf("unsupported reply %q", line)
}

func ioReadFull(rd *bufio.Reader, buf []byte) (int, error) {
	n := 0
	for n < len(buf) {
		m, err := rd.Read(buf[n:])
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// freePort asks the kernel for a free port in its ephemeral (high) range.
// Another process may take it before redis-server binds; the window is
// tiny and the server then fails to start with a clear error.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// writeFile writes a config file into dir.
func writeFile(tb testing.TB, dir, name, text string) string {
	tb.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		tb.Fatalf("redistest: %v", err)
	}
	return p
}
