package main

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// connCounter is an upstream that counts the connections it accepted.
func connCounter(t *testing.T, h http.Handler) (*atomic.Int64, *httptest.Server) {
	var n atomic.Int64
	srv := httptest.NewUnstartedServer(h)
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			n.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	return &n, srv
}

// TestSlowBodyHoldsNoUpstreamConnection: 20 clients trickling their
// bodies held 20 upstream connections. With request buffering (the
// default) the upstream is contacted only once a body is complete; a body
// that stalls past client_body_timeout_ms gets 408 and never reaches it.
func TestSlowBodyHoldsNoUpstreamConnection(t *testing.T) {
	var got atomic.Value
	conns, up := connCounter(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got.Store(fmt.Sprintf("%d %x", len(b), sha256.Sum256(b)))
	}))
	const bodyTimeout = 400 * time.Millisecond
	_, gw := newTestGateway(t, minimal+"proxy:\n  client_body_timeout_ms: 400\n  body_memory_bytes: 1024\n", up.URL)
	host := strings.TrimPrefix(gw.URL, "http://")

	// Five slow clients: headers, then one byte at a time, well within
	// the timeout between reads but far from done.
	var clients []net.Conn
	for range 5 {
		c, err := net.Dial("tcp", host)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fmt.Fprintf(c, "POST /up HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n")
		clients = append(clients, c)
	}
	for range 3 {
		for _, c := range clients {
			_, _ = c.Write([]byte("a"))
		}
		time.Sleep(bodyTimeout / 4)
	}
	if n := conns.Load(); n != 0 {
		t.Errorf("%d upstream connections opened for bodies still arriving, want 0", n)
	}
	// Now they stall: each gets 408 once client_body_timeout_ms passes
	// without a byte, and the upstream never sees them.
	start := time.Now()
	for _, c := range clients {
		_ = c.SetReadDeadline(time.Now().Add(failAfter))
		res, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		if res.StatusCode != http.StatusRequestTimeout {
			t.Errorf("stalled body: %d, want 408", res.StatusCode)
		}
	}
	if took := time.Since(start); took < bodyTimeout/2 {
		t.Errorf("408 after %v: the stall was not waited for", took)
	}
	if n := conns.Load(); n != 0 {
		t.Errorf("%d upstream connections after the stalled bodies, want 0", n)
	}

	// A body larger than body_memory_bytes goes through a temporary file
	// and arrives whole, and the file is gone afterwards.
	body := bytes.Repeat([]byte("0123456789abcdef"), 4096) // 64 KiB
	before := tempBodies(t)
	res, err := http.Post(gw.URL+"/up", "application/octet-stream", io.MultiReader(bytes.NewReader(body))) // chunked
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if want := fmt.Sprintf("%d %x", len(body), sha256.Sum256(body)); res.StatusCode != 200 || got.Load() != want {
		t.Errorf("spooled body: status %d, upstream got %v, want %s", res.StatusCode, got.Load(), want)
	}
	if after := tempBodies(t); after > before {
		t.Errorf("%d temporary body files left behind", after-before)
	}
}

func tempBodies(t *testing.T) int {
	m, err := filepath.Glob(filepath.Join(os.TempDir(), "gateway-body-*"))
	if err != nil {
		t.Fatal(err)
	}
	return len(m)
}

// TestStreamingBodyTimesOut: with request_buffering off the body is
// streamed to the upstream, and a stall still ends it with 408 instead of
// holding the upstream connection.
func TestStreamingBodyTimesOut(t *testing.T) {
	upstreamDone := make(chan error, 1)
	_, up := connCounter(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, err := io.ReadAll(r.Body)
		upstreamDone <- err
	}))
	g, gw := newTestGateway(t, minimal+"proxy:\n  client_body_timeout_ms: 300\n  request_buffering: false\n", up.URL)
	c, err := net.Dial("tcp", strings.TrimPrefix(gw.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "POST /up HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nabc")
	_ = c.SetReadDeadline(time.Now().Add(failAfter))
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.StatusCode != http.StatusRequestTimeout {
		t.Errorf("stalled streamed body: %d, want 408", res.StatusCode)
	}
	select {
	case err := <-upstreamDone:
		if err == nil {
			t.Error("the upstream read a complete body from a stalled client")
		}
	case <-time.After(failAfter):
		t.Error("the upstream is still reading the stalled body")
	}
	if got := testutilCounter(t, g.metrics, "slidelimit_gateway_upstream_errors_total", `kind="client_body_timeout"`); got != 1 {
		t.Errorf("client_body_timeout counter %v, want 1", got)
	}
}

// TestStalledResponseBodyIsCut: the upstream sent its header and then
// stalled its body; the gateway waited as long as it liked. read_timeout_ms
// now bounds the wait between two reads.
func TestStalledResponseBodyIsCut(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "10")
		_, _ = io.WriteString(w, "part")
		_ = http.NewResponseController(w).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer up.Close()
	const readTimeout = 300 * time.Millisecond
	g, gw := newTestGateway(t, minimal+"proxy:\n  read_timeout_ms: 300\n", up.URL)
	start := time.Now()
	// The gateway cuts the connection: what it had buffered may or may not
	// have gone out first, but the body never completes.
	res, err := http.Get(gw.URL + "/stall")
	if err == nil {
		var b []byte
		b, err = io.ReadAll(res.Body)
		res.Body.Close()
		if err == nil {
			t.Errorf("stalled body arrived whole: %q", b)
		}
	}
	took := time.Since(start)
	if took < readTimeout || took > readTimeout+failAfter/4 {
		t.Errorf("cut after %v, want about %v", took, readTimeout)
	}
	if got := testutilCounter(t, g.metrics, "slidelimit_gateway_upstream_errors_total", `kind="read_timeout"`); got != 1 {
		t.Errorf("read_timeout counter %v, want 1", got)
	}
	// A slow but steady body is not cut: the timeout is between two reads
	// (here 1 s), not on the whole body (1.5 s, 250 ms apart).
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for i := 0; i < 6; i++ {
			_, _ = io.WriteString(w, "x")
			_ = http.NewResponseController(w).Flush()
			time.Sleep(250 * time.Millisecond)
		}
	}))
	defer slow.Close()
	_, gw2 := newTestGateway(t, minimal+"proxy:\n  read_timeout_ms: 1000\n", slow.URL)
	res, err = http.Get(gw2.URL + "/")
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(res.Body)
	res.Body.Close()
	if err != nil || string(b) != "xxxxxx" {
		t.Errorf("steady body: %q, %v", b, err)
	}
}

// TestTruncatedBodyNeverForwarded: a client that hangs up short of its
// Content-Length must not have its partial body forwarded as if complete
// (the server's body says io.ErrUnexpectedEOF, not io.EOF).
func TestTruncatedBodyNeverForwarded(t *testing.T) {
	conns, up := connCounter(t, http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	_, gw := newTestGateway(t, minimal, up.URL)
	for _, size := range []int{10, 40 << 10} { // in memory, and spilled to a file
		c, err := net.Dial("tcp", strings.TrimPrefix(gw.URL, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(c, "POST /up HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n", size+100)
		_, _ = c.Write(bytes.Repeat([]byte("a"), size))
		_ = c.(*net.TCPConn).CloseWrite()
		_ = c.SetReadDeadline(time.Now().Add(failAfter))
		_, _ = io.Copy(io.Discard, c) // whatever comes back, until the gateway closes
		c.Close()
	}
	// The gateway handled both before closing; the upstream saw nothing.
	if n := conns.Load(); n != 0 {
		t.Errorf("%d upstream connections for truncated bodies, want 0", n)
	}
}

// TestClientThatStopsReadingReleasesTheUpstream (the mirror image of a
// slow request body): a client that sends its request and never reads the response
// held the proxy's copy, the upstream connection and the upstream's
// handler for as long as it liked. client_send_timeout_ms bounds the wait
// for each write.
func TestClientThatStopsReadingReleasesTheUpstream(t *testing.T) {
	upstreamDone := make(chan error, 1)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		chunk := bytes.Repeat([]byte("x"), 64<<10)
		for i := 0; i < 4096; i++ { // 256 MiB: far more than any socket buffers
			if _, err := w.Write(chunk); err != nil {
				upstreamDone <- err
				return
			}
		}
		upstreamDone <- nil
	}))
	defer up.Close()
	_, gw := newTestGateway(t, minimal+"proxy:\n  client_send_timeout_ms: 300\n", up.URL)
	c, err := net.Dial("tcp", strings.TrimPrefix(gw.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.(*net.TCPConn).SetReadBuffer(4096)
	fmt.Fprintf(c, "GET /big HTTP/1.1\r\nHost: x\r\n\r\n") // and never read
	select {
	case err := <-upstreamDone:
		if err == nil {
			t.Error("the upstream wrote 256 MiB to a client that read nothing")
		}
	case <-time.After(failAfter):
		t.Fatal("the upstream is still held by a client that stopped reading")
	}
}
