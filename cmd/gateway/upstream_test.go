package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/textproto"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// directConfig refuses nothing in the tests below, which send more
// requests than minimal's 10 a second.
const directConfig = `
rate_limiting:
  sliding_window:
    window_size_ms: 1000
    max_requests: 1000000
`

// rawUpstream is a loopback TCP upstream that answers byte for byte what
// its serve function writes, to give the gateway framings a Go server
// would never send. It logs each request it reads, with the number of the
// connection it came on (1 for the first accepted).
type rawUpstream struct {
	ln    net.Listener
	serve func(u *rawUpstream, conn int, c net.Conn, br *bufio.Reader)
	wg    sync.WaitGroup

	mu     sync.Mutex
	log    []string // "conn N: METHOD /path"
	conns  int
	closed []int // connections whose peer (the gateway) closed them, in order
}

func newRawUpstream(t *testing.T, serve func(u *rawUpstream, conn int, c net.Conn, br *bufio.Reader)) *rawUpstream {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u := &rawUpstream{ln: ln, serve: serve}
	var open sync.Map // net.Conn -> struct{}
	u.wg.Add(1)
	go func() {
		defer u.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u.mu.Lock()
			u.conns++
			n := u.conns
			u.mu.Unlock()
			open.Store(c, struct{}{})
			u.wg.Add(1)
			go func() {
				defer u.wg.Done()
				defer open.Delete(c)
				defer c.Close()
				u.serve(u, n, c, bufio.NewReader(c))
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		open.Range(func(k, _ any) bool { k.(net.Conn).Close(); return true })
		u.wg.Wait()
	})
	return u
}

func (u *rawUpstream) url() string { return "http://" + u.ln.Addr().String() }

// read reads one request from br and logs it; false when the peer closed
// the connection (also logged, in closed).
func (u *rawUpstream) read(conn int, br *bufio.Reader) bool {
	req, err := http.ReadRequest(br)
	u.mu.Lock()
	defer u.mu.Unlock()
	if err != nil {
		u.closed = append(u.closed, conn)
		return false
	}
	u.log = append(u.log, fmt.Sprintf("conn %d: %s %s", conn, req.Method, req.URL.Path))
	return true
}

func (u *rawUpstream) requests() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]string(nil), u.log...)
}

// waitClosed waits until the gateway closed connection conn (the
// upstream's read of its next request ended).
func (u *rawUpstream) waitClosed(t *testing.T, conn int) {
	t.Helper()
	u.waitClosedWithin(t, conn, failAfter)
}

// answerEach answers every request on every connection with resp.
func answerEach(resp string) func(*rawUpstream, int, net.Conn, *bufio.Reader) {
	return func(u *rawUpstream, n int, c net.Conn, br *bufio.Reader) {
		for u.read(n, br) {
			if _, err := io.WriteString(c, resp); err != nil {
				return
			}
		}
	}
}

// directOf is the gateway's current upstream transport.
func directOf(g *gateway) *upstreamTransport { return g.cur.Load().proxy.tr }

// fetch sends one request through the gateway on client and returns the
// status and body.
func fetch(t *testing.T, client *http.Client, method, url string) (int, string, http.Header) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatalf("%s %s: reading the body: %v", method, url, err)
	}
	return res.StatusCode, string(b), res.Header
}

// TestDirectPathFramesEachResponseAndReusesOnlyCompleteOnes: each framing
// a response may have reaches the client intact over the direct path, and
// the upstream connection is reused only when the response ended where
// its framing said (Content-Length, chunked, bodyless statuses and HEAD),
// never after a body delimited by the connection's close.
func TestDirectPathFramesEachResponseAndReusesOnlyCompleteOnes(t *testing.T) {
	for _, tc := range []struct {
		name, method, resp string
		status             int
		body               string
		dials              uint64 // for two requests
	}{
		{"content-length", "GET", "HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nok\n", 200, "ok\n", 1},
		{"chunked with trailer", "GET", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: X-Sum\r\n\r\n2\r\nok\r\n1\r\n\n\r\n0\r\nX-Sum: 1\r\n\r\n", 200, "ok\n", 1},
		{"empty content-length", "GET", "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", 200, "", 1},
		{"head", "HEAD", "HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n", 200, "", 1},
		{"204", "GET", "HTTP/1.1 204 No Content\r\n\r\n", 204, "", 1},
		{"304", "GET", "HTTP/1.1 304 Not Modified\r\nContent-Length: 1000\r\n\r\n", 304, "", 1},
		{"http/1.0 without keep-alive", "GET", "HTTP/1.0 200 OK\r\nContent-Length: 3\r\n\r\nok\n", 200, "ok\n", 2},
		{"connection: close", "GET", "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 3\r\n\r\nok\n", 200, "ok\n", 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			up := newRawUpstream(t, answerEach(tc.resp))
			g, gw := newTestGateway(t, directConfig, up.url())
			client := &http.Client{Transport: &http.Transport{}, Timeout: failAfter}
			defer client.CloseIdleConnections()
			for i := range 2 {
				status, body, _ := fetch(t, client, tc.method, gw.URL+"/x")
				if status != tc.status || body != tc.body {
					t.Fatalf("request %d: %d %q, want %d %q", i, status, body, tc.status, tc.body)
				}
			}
			tr := directOf(g)
			if got := tr.dials.Load(); got != tc.dials {
				t.Errorf("%d upstream connections for two requests, want %d", got, tc.dials)
			}
			if got := tr.stdTrips.Load(); got != 0 {
				t.Errorf("%d requests took http.Transport's path, want 0", got)
			}
		})
	}
}

// TestDirectPathCloseDelimitedBodyIsNeverReused: a body without
// Content-Length or chunking ends when the upstream closes; it reaches
// the client whole and its connection is never pooled.
func TestDirectPathCloseDelimitedBodyIsNeverReused(t *testing.T) {
	up := newRawUpstream(t, func(u *rawUpstream, n int, c net.Conn, br *bufio.Reader) {
		if u.read(n, br) {
			_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\n\r\nuntil close\n")
		}
	})
	g, gw := newTestGateway(t, directConfig, up.url())
	client := &http.Client{Transport: &http.Transport{}, Timeout: failAfter}
	defer client.CloseIdleConnections()
	for i := range 2 {
		if status, body, _ := fetch(t, client, "GET", gw.URL+"/x"); status != 200 || body != "until close\n" {
			t.Fatalf("request %d: %d %q", i, status, body)
		}
	}
	if got := directOf(g).dials.Load(); got != 2 {
		t.Errorf("%d upstream connections, want 2", got)
	}
}

// TestDirectPathTransferEncodingOverridesContentLength: a response with
// both headers is read as chunked (RFC 9112 section 6.3) and reaches the
// client without the Content-Length; the next response on the same
// connection is read where the chunked framing says it starts, so nothing
// of the first answers the second.
func TestDirectPathTransferEncodingOverridesContentLength(t *testing.T) {
	up := newRawUpstream(t, func(u *rawUpstream, n int, c net.Conn, br *bufio.Reader) {
		for i := 0; u.read(n, br); i++ {
			_, _ = fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: 100\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nr%d\n\r\n0\r\n\r\n", i)
		}
	})
	g, gw := newTestGateway(t, directConfig, up.url())
	client := &http.Client{Transport: &http.Transport{}, Timeout: failAfter}
	defer client.CloseIdleConnections()
	for i := range 2 {
		status, body, h := fetch(t, client, "GET", gw.URL+"/x")
		if want := fmt.Sprintf("r%d\n", i); status != 200 || body != want {
			t.Fatalf("request %d: %d %q, want 200 %q", i, status, body, want)
		}
		if h.Get("Content-Length") == "100" {
			t.Errorf("request %d: the upstream's Content-Length reached the client", i)
		}
	}
	if got := directOf(g).dials.Load(); got != 1 {
		t.Errorf("%d upstream connections, want 1", got)
	}
}

// TestDirectPathRefusesTwoContentLengths: two different Content-Lengths
// leave the body's end unknown: 502, and the connection is closed, not
// reused for the next request.
func TestDirectPathRefusesTwoContentLengths(t *testing.T) {
	up := newRawUpstream(t, func(u *rawUpstream, n int, c net.Conn, br *bufio.Reader) {
		for u.read(n, br) {
			if n == 1 {
				_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 8\r\n\r\nok\nHTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nevil")
				continue
			}
			_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nfresh\n")
		}
	})
	_, gw := newTestGateway(t, directConfig, up.url())
	client := &http.Client{Transport: &http.Transport{}, Timeout: failAfter}
	defer client.CloseIdleConnections()
	if status, _, _ := fetch(t, client, "GET", gw.URL+"/a"); status != http.StatusBadGateway {
		t.Fatalf("two Content-Lengths: %d, want 502", status)
	}
	if status, body, _ := fetch(t, client, "GET", gw.URL+"/b"); status != 200 || body != "fresh\n" {
		t.Fatalf("next request: %d %q, want 200 \"fresh\\n\"", status, body)
	}
	up.waitClosed(t, 1)
	want := []string{"conn 1: GET /a", "conn 2: GET /b"}
	if got := up.requests(); strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("upstream saw %q, want %q", got, want)
	}
}

// TestUnsolicitedUpstreamBytesNeverReachTheNextClient: an upstream that
// sends more than the one response asked for (a second response in the
// same write, or one sent later while the connection sits idle) is out of
// step with the gateway; the extra bytes must never be read as the next
// request's response: the connection is dropped and the next request
// goes on a fresh one.
func TestUnsolicitedUpstreamBytesNeverReachTheNextClient(t *testing.T) {
	const evil = "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nevil\n"
	for _, tc := range []struct {
		name  string
		later bool // the second response comes after the first was read, not with it
	}{{"in the same write", false}, {"while idle", true}} {
		t.Run(tc.name, func(t *testing.T) {
			sent := make(chan struct{})
			up := newRawUpstream(t, func(u *rawUpstream, n int, c net.Conn, br *bufio.Reader) {
				for i := 0; u.read(n, br); i++ {
					if n > 1 || i > 0 {
						_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nfresh\n")
						continue
					}
					if !tc.later {
						_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nok\n"+evil)
						close(sent)
						continue
					}
					_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nok\n")
					// The gateway has the whole response once it could
					// read it; a little later, the unsolicited one.
					time.Sleep(50 * time.Millisecond)
					_, _ = io.WriteString(c, evil)
					close(sent)
				}
			})
			g, gw := newTestGateway(t, directConfig, up.url())
			client := &http.Client{Transport: &http.Transport{}, Timeout: failAfter}
			defer client.CloseIdleConnections()
			if status, body, _ := fetch(t, client, "GET", gw.URL+"/a"); status != 200 || body != "ok\n" {
				t.Fatalf("first request: %d %q", status, body)
			}
			<-sent
			if status, body, _ := fetch(t, client, "GET", gw.URL+"/b"); status != 200 || body != "fresh\n" {
				t.Fatalf("second request: %d %q, want the answer to it (200 \"fresh\\n\")", status, body)
			}
			up.waitClosed(t, 1)
			if got := up.requests(); len(got) != 2 || got[1] != "conn 2: GET /b" {
				t.Errorf("upstream saw %q, want the second request on a second connection", got)
			}
			if got := directOf(g).dials.Load(); got != 2 {
				t.Errorf("%d upstream connections, want 2", got)
			}
		})
	}
}

// TestIdleConnectionClosedByUpstreamIsNotUsed: an upstream that closes a
// connection after answering (its keep-alive timeout) costs nothing: the
// next request goes on a fresh connection, and the upstream sees each
// request once.
func TestIdleConnectionClosedByUpstreamIsNotUsed(t *testing.T) {
	up := newRawUpstream(t, func(u *rawUpstream, n int, c net.Conn, br *bufio.Reader) {
		if u.read(n, br) {
			_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nok\n")
		}
		// then closes, without saying so in the response
	})
	_, gw := newTestGateway(t, directConfig, up.url())
	client := &http.Client{Transport: &http.Transport{}, Timeout: failAfter}
	defer client.CloseIdleConnections()
	for i := range 3 {
		if status, body, _ := fetch(t, client, "GET", fmt.Sprintf("%s/%d", gw.URL, i)); status != 200 || body != "ok\n" {
			t.Fatalf("request %d: %d %q", i, status, body)
		}
	}
	want := []string{"conn 1: GET /0", "conn 2: GET /1", "conn 3: GET /2"}
	if got := up.requests(); strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("upstream saw %q, want %q", got, want)
	}
}

// TestReusedConnectionThatFailsBeforeAnswerIsRetriedOnce: an upstream
// that closes a reused connection after the request went out, before any
// byte of a response (the keep-alive race), gets the idempotent request
// once more on a fresh connection; a fresh connection that fails the same
// way is not retried (502): the failure is the upstream's, not a stale
// connection's.
func TestReusedConnectionThatFailsBeforeAnswerIsRetriedOnce(t *testing.T) {
	up := newRawUpstream(t, func(u *rawUpstream, n int, c net.Conn, br *bufio.Reader) {
		for i := 0; u.read(n, br); i++ {
			if n == 1 && i == 1 || n == 3 {
				return // hang up on it unanswered
			}
			_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nok\n")
		}
	})
	g, gw := newTestGateway(t, directConfig, up.url())
	client := &http.Client{Transport: &http.Transport{}, Timeout: failAfter}
	defer client.CloseIdleConnections()
	for i := range 2 {
		if status, body, _ := fetch(t, client, "GET", fmt.Sprintf("%s/%d", gw.URL, i)); status != 200 || body != "ok\n" {
			t.Fatalf("request %d: %d %q", i, status, body)
		}
	}
	want := []string{"conn 1: GET /0", "conn 1: GET /1", "conn 2: GET /1"}
	if got := up.requests(); strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("upstream saw %q, want %q", got, want)
	}
	// Connection 2 is idle in the pool; close it so that the next
	// request dials connection 3, which hangs up: no retry.
	directOf(g).CloseIdleConnections()
	if status, _, _ := fetch(t, client, "GET", gw.URL+"/2"); status != http.StatusBadGateway {
		t.Errorf("fresh connection hung up: %d, want 502", status)
	}
	if got := up.requests(); len(got) != 4 || got[3] != "conn 3: GET /2" {
		t.Errorf("upstream saw %q, want the last request once, on connection 3", got)
	}
}

// TestClientGoneWhileUpstreamStallsIs499AndFreesTheConnection: a client
// that leaves while the upstream has not answered (499) or is in the
// middle of its body ends the upstream call: the upstream's connection is
// closed (not kept for a response nobody reads, nor pooled with half a
// response in it) and no goroutine is left behind.
func TestClientGoneWhileUpstreamStallsIs499AndFreesTheConnection(t *testing.T) {
	for _, tc := range []struct {
		name    string
		partial string // what the upstream sends before it stalls
	}{
		{"before the header", ""},
		{"after the header", "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\npart"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stalled := make(chan struct{}, 1)
			up := newRawUpstream(t, func(u *rawUpstream, n int, c net.Conn, br *bufio.Reader) {
				if !u.read(n, br) {
					return
				}
				_, _ = io.WriteString(c, tc.partial)
				stalled <- struct{}{}
				u.read(n, br) // returns when the gateway closes the connection
			})
			// Timeouts longer than the test waits: only the client's
			// leaving may end the upstream call.
			g, gw := newTestGateway(t, directConfig+"proxy:\n  response_header_timeout_ms: 600000\n  read_timeout_ms: 600000\n", up.url())
			before := runtime.NumGoroutine()
			ctx, cancel := context.WithCancel(context.Background())
			client := &http.Client{Transport: &http.Transport{}, Timeout: failAfter}
			req, _ := http.NewRequestWithContext(ctx, "GET", gw.URL+"/slow", nil)
			done := make(chan error, 1)
			go func() {
				res, err := client.Do(req)
				if err == nil {
					_, err = io.ReadAll(res.Body)
					res.Body.Close()
				}
				done <- err
			}()
			<-stalled
			cancel()
			if err := <-done; err == nil {
				t.Fatal("the client's request ended without an error")
			}
			client.CloseIdleConnections()
			up.waitClosed(t, 1)
			if tc.partial == "" {
				waitFor(t, "client_gone counted", func() bool {
					return testutilCounter(t, g.metrics, "slidelimit_gateway_upstream_errors_total", `kind="client_gone"`) == 1
				})
			}
			tr := directOf(g)
			tr.mu.Lock()
			idle := len(tr.idle)
			tr.mu.Unlock()
			if idle != 0 {
				t.Errorf("%d connections pooled after an abandoned response, want 0", idle)
			}
			waitFor(t, "the request's goroutines to end", func() bool { return runtime.NumGoroutine() <= before })
		})
	}
}

// waitFor polls cond until it holds, failing after failAfter.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(failAfter)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("still waiting for %s after %v", what, failAfter)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestDirectPathResponseHeaderTimeoutIs504: an upstream that reads the
// request and never answers gets 504 after response_header_timeout_ms on
// the direct path, and its connection is closed.
func TestDirectPathResponseHeaderTimeoutIs504(t *testing.T) {
	up := newRawUpstream(t, func(u *rawUpstream, n int, c net.Conn, br *bufio.Reader) {
		for u.read(n, br) {
		}
	})
	g, gw := newTestGateway(t, directConfig+"proxy:\n  response_header_timeout_ms: 200\n", up.url())
	client := &http.Client{Transport: &http.Transport{}, Timeout: failAfter}
	defer client.CloseIdleConnections()
	if status, _, _ := fetch(t, client, "GET", gw.URL+"/slow"); status != http.StatusGatewayTimeout {
		t.Fatalf("status %d, want 504", status)
	}
	up.waitClosed(t, 1)
	if got := testutilCounter(t, g.metrics, "slidelimit_gateway_upstream_errors_total", `kind="timeout"`); got != 1 {
		t.Errorf("timeout counter %v, want 1", got)
	}
	if got := directOf(g).stdTrips.Load(); got != 0 {
		t.Errorf("%d requests on http.Transport's path, want the direct one", got)
	}
}

// TestDirectPathPassesInformationalResponsesOn: 1xx responses before the
// final one (a stray 100 Continue, 103 Early Hints) are read past, and
// 103's Link reaches the client as Transport would pass it; an upstream
// that sends 1xx without end gets 502.
func TestDirectPathPassesInformationalResponsesOn(t *testing.T) {
	up := newRawUpstream(t, func(u *rawUpstream, n int, c net.Conn, br *bufio.Reader) {
		for u.read(n, br) {
			if n == 1 {
				_, _ = io.WriteString(c, "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nok\n")
				continue
			}
			for range 100 {
				if _, err := io.WriteString(c, "HTTP/1.1 103 Early Hints\r\n\r\n"); err != nil {
					return
				}
			}
		}
	})
	g, gw := newTestGateway(t, directConfig, up.url())
	var hints []string
	trace := &httptrace.ClientTrace{Got1xxResponse: func(code int, h textproto.MIMEHeader) error {
		if code == http.StatusEarlyHints {
			hints = append(hints, h.Get("Link"))
		}
		return nil
	}}
	client := &http.Client{Transport: &http.Transport{}, Timeout: failAfter}
	defer client.CloseIdleConnections()
	req, _ := http.NewRequestWithContext(httptrace.WithClientTrace(context.Background(), trace), "GET", gw.URL+"/", nil)
	res, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 200 || string(b) != "ok\n" {
		t.Fatalf("%d %q, want 200 ok", res.StatusCode, b)
	}
	if len(hints) != 1 || hints[0] != "</a.css>; rel=preload" {
		t.Errorf("early hints at the client: %q", hints)
	}
	directOf(g).CloseIdleConnections()
	if status, _, _ := fetch(t, client, "GET", gw.URL+"/"); status != http.StatusBadGateway {
		t.Errorf("endless 1xx: %d, want 502", status)
	}
}

// TestRequestsOutsideTheDirectPathTakeTheTransport: a request with a body
// (POST), a method that is not GET or HEAD (DELETE) and an upgrade go
// through http.Transport, unchanged.
func TestRequestsOutsideTheDirectPathTakeTheTransport(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Upgrade") == "websocket" {
			c, brw, err := http.NewResponseController(w).Hijack()
			if err != nil {
				return
			}
			defer c.Close()
			_, _ = brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n")
			_ = brw.Flush()
			return
		}
		b, _ := io.ReadAll(r.Body)
		_, _ = fmt.Fprintf(w, "%s %s", r.Method, b)
	}))
	defer up.Close()
	g, gw := newTestGateway(t, directConfig, up.URL)
	tr := directOf(g)
	res, err := http.Post(gw.URL+"/", "text/plain", strings.NewReader("hello"))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if string(b) != "POST hello" {
		t.Errorf("POST: %q", b)
	}
	if got := tr.stdTrips.Load(); got != 1 {
		t.Errorf("POST: %d requests on http.Transport's path, want 1", got)
	}
	req, _ := http.NewRequest(http.MethodDelete, gw.URL+"/", nil)
	if res, err = http.DefaultClient.Do(req); err != nil {
		t.Fatal(err)
	}
	b, _ = io.ReadAll(res.Body)
	res.Body.Close()
	if string(b) != "DELETE " {
		t.Errorf("DELETE: %q", b)
	}
	if got := tr.stdTrips.Load(); got != 2 {
		t.Errorf("DELETE without a body: %d requests on http.Transport's path, want 2 (it is not retried as GET is)", got)
	}
	conn, err := net.Dial("tcp", strings.TrimPrefix(gw.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_, _ = io.WriteString(conn, "GET /ws HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n")
	res, err = http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.StatusCode != http.StatusSwitchingProtocols {
		t.Errorf("upgrade: %d", res.StatusCode)
	}
	if got := tr.stdTrips.Load(); got != 3 {
		t.Errorf("upgrade: %d requests on http.Transport's path, want 3", got)
	}
	if got := tr.dials.Load(); got != 0 {
		t.Errorf("the direct path opened %d connections, want 0", got)
	}
}

// TestDirectPathUnderConcurrency: concurrent requests each get their own
// answer (the upstream echoes the path) over at most as many upstream
// connections as there are clients, reused from request to request.
func TestDirectPathUnderConcurrency(t *testing.T) {
	var conns atomic.Int64
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, r.URL.Path)
	}))
	up.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	up.Start()
	defer up.Close()
	g, gw := newTestGateway(t, directConfig, up.URL)
	const clients, each = 8, 50
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			client := &http.Client{Transport: &http.Transport{}, Timeout: failAfter}
			defer client.CloseIdleConnections()
			for i := range each {
				path := fmt.Sprintf("/c%d/r%d", c, i)
				res, err := client.Get(gw.URL + path)
				if err != nil {
					errs <- err
					return
				}
				b, err := io.ReadAll(res.Body)
				res.Body.Close()
				if err != nil || string(b) != path {
					errs <- fmt.Errorf("%s answered %q (%v)", path, b, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	tr := directOf(g)
	if d := tr.dials.Load(); d == 0 || d > clients {
		t.Errorf("%d upstream connections for %d clients", d, clients)
	}
	if n := conns.Load(); n > clients {
		t.Errorf("the upstream saw %d connections for %d clients", n, clients)
	}
	if got := tr.stdTrips.Load(); got != 0 {
		t.Errorf("%d requests on http.Transport's path", got)
	}
}

// TestDirectPathIdleConnectionsCloseAfterIdleTimeout: a pooled connection
// is closed once idle_conn_timeout_ms passed, and all are closed when the
// configuration is retired (CloseIdleConnections).
func TestDirectPathIdleConnectionsCloseAfterIdleTimeout(t *testing.T) {
	up := newRawUpstream(t, answerEach("HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nok\n"))
	_, gw := newTestGateway(t, directConfig+"proxy:\n  idle_conn_timeout_ms: 100\n", up.url())
	client := &http.Client{Transport: &http.Transport{}, Timeout: failAfter}
	defer client.CloseIdleConnections()
	if status, _, _ := fetch(t, client, "GET", gw.URL+"/"); status != 200 {
		t.Fatal(status)
	}
	up.waitClosed(t, 1)

	g2, gw2 := newTestGateway(t, directConfig, up.url())
	if status, _, _ := fetch(t, client, "GET", gw2.URL+"/"); status != 200 {
		t.Fatal(status)
	}
	g2.cur.Load().proxy.tr.CloseIdleConnections()
	up.waitClosed(t, 2)
}

// TestDirectPathErrorsUnwrapToTheirCause: a request whose context ended
// fails with an error that names the context's cause, as the error
// handler needs to tell a client gone from an upstream failure.
func TestDirectPathErrorsUnwrapToTheirCause(t *testing.T) {
	up := newRawUpstream(t, func(u *rawUpstream, n int, c net.Conn, br *bufio.Reader) {
		for u.read(n, br) {
		}
	})
	g, _ := newTestGateway(t, directConfig, up.url())
	tr := directOf(g)
	cause := errors.New("the test gave up")
	ctx, cancel := context.WithCancelCause(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", up.url()+"/", nil)
	go func() {
		waitForRequests(up, 1)
		cancel(cause)
	}()
	_, err := tr.RoundTrip(req)
	if !errors.Is(err, cause) {
		t.Errorf("error %v, want it to wrap the context's cause", err)
	}
}

func waitForRequests(u *rawUpstream, n int) {
	for len(u.requests()) < n {
		time.Sleep(time.Millisecond)
	}
}

// TestBodyClosedBeforeItsEndClosesTheConnection: a response body closed
// before its end (the copy to the client failed) closes its connection:
// the rest of the body is still on its way, and the next request must
// not read it as its response.
func TestBodyClosedBeforeItsEndClosesTheConnection(t *testing.T) {
	more := make(chan struct{})
	up := newRawUpstream(t, func(u *rawUpstream, n int, c net.Conn, br *bufio.Reader) {
		if !u.read(n, br) {
			return
		}
		// The body's first bytes, then, once the gateway has read
		// them (nothing buffered at its end), the rest.
		_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n0123")
		<-more
		_, _ = io.WriteString(c, "456789")
		u.read(n, br)
	})
	g, _ := newTestGateway(t, directConfig, up.url())
	tr := directOf(g)
	req, _ := http.NewRequest("GET", up.url()+"/", nil)
	res, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 4)
	if _, err := io.ReadFull(res.Body, b); err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	tr.mu.Lock()
	idle := len(tr.idle)
	tr.mu.Unlock()
	if idle != 0 {
		t.Errorf("%d connections pooled, want 0", idle)
	}
	close(more)
	up.waitClosed(t, 1)
	if _, err := res.Body.Read(b); err == nil {
		t.Error("a read after Close succeeded")
	}
}

// TestUpstreamStatusBelow100IsBadGatewayNotAPanic: http.ReadResponse takes
// any three digits as a status and WriteHeader panics below 100; on either
// path such an answer is a 502 and its connection is closed.
func TestUpstreamStatusBelow100IsBadGatewayNotAPanic(t *testing.T) {
	for _, tc := range []struct{ name, method, status string }{
		{"direct 099", "GET", "099"},
		{"direct 000 without a body", "GET", "000"},
		{"transport 099", "POST", "099"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			up := newRawUpstream(t, func(u *rawUpstream, n int, c net.Conn, br *bufio.Reader) {
				if !u.read(n, br) {
					return
				}
				cl := "2\r\n\r\nok"
				if strings.Contains(tc.name, "without") {
					cl = "0\r\n\r\n"
				}
				_, _ = io.WriteString(c, "HTTP/1.1 "+tc.status+" Odd\r\nContent-Length: "+cl)
				u.read(n, br)
			})
			g, gw := newTestGateway(t, directConfig, up.url())
			var body io.Reader
			if tc.method == "POST" {
				body = strings.NewReader("x")
			}
			req, _ := http.NewRequest(tc.method, gw.URL+"/odd", body)
			client := &http.Client{Transport: &http.Transport{}, Timeout: failAfter}
			defer client.CloseIdleConnections()
			res, err := client.Do(req)
			if err != nil {
				t.Fatalf("status %s: %v, want a 502", tc.status, err)
			}
			_, _ = io.Copy(io.Discard, res.Body)
			res.Body.Close()
			if res.StatusCode != http.StatusBadGateway {
				t.Fatalf("status %s: %d, want 502", tc.status, res.StatusCode)
			}
			tr := directOf(g)
			tr.mu.Lock()
			idle := len(tr.idle)
			tr.mu.Unlock()
			if idle != 0 {
				t.Errorf("status %s: the connection was pooled", tc.status)
			}
			up.waitClosed(t, 1)
		})
	}
}
