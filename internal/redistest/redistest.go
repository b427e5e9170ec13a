package redistest

import (
	"bufio"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Server is one redis-server process owned by a test.
type Server struct {
	tb   testing.TB
	bin  string
	dir  string
	port int

	mu  sync.Mutex
	cmd *exec.Cmd
}

// readyTimeout bounds how long Start and Restart wait for PING. It is a
// guard against a hung child, not a speed assertion.
const readyTimeout = 10 * time.Second

// Start launches redis-server on 127.0.0.1 with a free high port and stops it
// when the test ends. It skips tb when no redis-server binary is installed.
func Start(tb testing.TB) *Server {
	tb.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		tb.Skip("redistest: redis-server not found in PATH; install it with `apt-get install redis-server` (make test does this through mk/redis.mk)")
	}
	port, err := freePort()
	if err != nil {
		tb.Fatalf("redistest: find a free port: %v", err)
	}
	s := &Server{tb: tb, bin: bin, dir: tb.TempDir(), port: port}
	if err := s.start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(s.Kill)
	return s
}

// Addr is host:port of the server.
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// Kill stops the server at once (SIGKILL) and waits for it to exit. Calling
// it on a stopped server does nothing.
func (s *Server) Kill() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait() // reaps the child; the error is the kill signal
	s.cmd = nil
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
	cmd := exec.Command(s.bin,
		"--bind", "127.0.0.1",
		"--port", strconv.Itoa(s.port),
		"--save", "",
		"--appendonly", "no",
		"--dir", s.dir,
		"--protected-mode", "yes",
		"--loglevel", "warning",
	)
	var out strings.Builder
	cmd.Stdout = &out
	cmd.Stderr = &out
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("redistest: start %s: %w", s.bin, err)
	}
	deadline := time.Now().Add(readyTimeout)
	for {
		if err := ping(s.Addr()); err == nil {
			s.cmd = cmd
			return nil
		} else if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			return fmt.Errorf("redistest: redis-server on %s did not answer PING within %v: %v; output: %s", s.Addr(), readyTimeout, err, out.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// ping speaks just enough RESP to check the server is up, so the helper does
// not depend on a client library.
func ping(addr string) error {
	c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(500 * time.Millisecond))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if strings.TrimSpace(line) != "+PONG" {
		return fmt.Errorf("PING answered %q", strings.TrimSpace(line))
	}
	return nil
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
