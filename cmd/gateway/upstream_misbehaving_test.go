package main

// Attacks on the upstream round trip (upstream.go) from an upstream that
// misbehaves on purpose: each test states the guarantee it tries to break.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// tryFetch is fetch for requests that may fail: the error instead of a
// fatal one.
func tryFetch(client *http.Client, method, url string) (int, string, error) {
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		return 0, "", err
	}
	res, err := client.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	return res.StatusCode, string(b), err
}

// waitClosedWithin is waitClosed with its own bound, for tests whose
// failure would otherwise wait failAfter.
func (u *rawUpstream) waitClosedWithin(t *testing.T, conn int, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		u.mu.Lock()
		for _, c := range u.closed {
			if c == conn {
				u.mu.Unlock()
				return
			}
		}
		u.mu.Unlock()
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("upstream connection %d still open after %v", conn, d)
}

// TestReusedConnectionWithPartialHeaderIsNotRetried: a reused
// connection on which the upstream sent part of a response header and then
// closed has answered something: the request is not sent again (502), and
// the upstream sees it once.
func TestReusedConnectionWithPartialHeaderIsNotRetried(t *testing.T) {
	up := newRawUpstream(t, func(u *rawUpstream, n int, c net.Conn, br *bufio.Reader) {
		if !u.read(n, br) {
			return
		}
		if _, err := io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nok\n"); err != nil {
			return
		}
		if !u.read(n, br) {
			return
		}
		_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Le")
	})
	g, gw := newTestGateway(t, directConfig, up.url())
	client := &http.Client{Transport: &http.Transport{}, Timeout: failAfter}
	defer client.CloseIdleConnections()
	if status, body, _ := fetch(t, client, "GET", gw.URL+"/one"); status != 200 || body != "ok\n" {
		t.Fatalf("first request: %d %q", status, body)
	}
	if status, _, _ := fetch(t, client, "GET", gw.URL+"/two"); status != http.StatusBadGateway {
		t.Fatalf("a response cut in its header: %d, want 502", status)
	}
	want := []string{"conn 1: GET /one", "conn 1: GET /two"}
	if got := up.requests(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("upstream saw %q, want %q (no retry once a response began)", got, want)
	}
	if got := directOf(g).dials.Load(); got != 1 {
		t.Errorf("%d upstream connections, want 1", got)
	}
}

// TestReusedConnectionHeaderTimeoutIsNotRetried: a reused
// connection whose upstream never answers ends in 504 after
// response_header_timeout_ms, once: a timeout is no stale connection, and
// the upstream must not get the request a second time.
func TestReusedConnectionHeaderTimeoutIsNotRetried(t *testing.T) {
	up := newRawUpstream(t, func(u *rawUpstream, n int, c net.Conn, br *bufio.Reader) {
		if !u.read(n, br) {
			return
		}
		if _, err := io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nok\n"); err != nil {
			return
		}
		if !u.read(n, br) {
			return
		}
		u.read(n, br) // never answers; returns when the gateway closes
	})
	g, gw := newTestGateway(t, directConfig+"proxy:\n  response_header_timeout_ms: 300\n", up.url())
	client := &http.Client{Transport: &http.Transport{}, Timeout: failAfter}
	defer client.CloseIdleConnections()
	if status, _, _ := fetch(t, client, "GET", gw.URL+"/one"); status != 200 {
		t.Fatalf("first request: %d", status)
	}
	if status, _, _ := fetch(t, client, "GET", gw.URL+"/two"); status != http.StatusGatewayTimeout {
		t.Fatalf("an upstream that never answers a reused connection: %d, want 504", status)
	}
	up.waitClosed(t, 1)
	if got := up.requests(); len(got) != 2 {
		t.Errorf("upstream saw %q, want each request once", got)
	}
	if got := directOf(g).dials.Load(); got != 1 {
		t.Errorf("%d upstream connections, want 1 (no retry after a timeout)", got)
	}
}

// TestBodyAfterBodylessResponseNeverAnswersTheNextRequest: a body
// sent after a response that has none by its framing (HEAD, 204, 304), or
// bytes past a Content-Length, are bytes nobody asked for; when they came
// in the same write they must not be read as the next request's response,
// even when they form one.
func TestBodyAfterBodylessResponseNeverAnswersTheNextRequest(t *testing.T) {
	const smuggled = "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nWRONG"
	for _, tc := range []struct {
		name, method, first string
	}{
		{"head with a body", "HEAD", "HTTP/1.1 200 OK\r\nContent-Length: 43\r\n\r\n" + smuggled},
		{"204 with a body", "GET", "HTTP/1.1 204 No Content\r\nContent-Length: 43\r\n\r\n" + smuggled},
		{"304 with a chunked body", "GET", "HTTP/1.1 304 Not Modified\r\nTransfer-Encoding: chunked\r\n\r\n" + smuggled},
		{"past content-length", "GET", "HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nok\n" + smuggled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			up := newRawUpstream(t, func(u *rawUpstream, n int, c net.Conn, br *bufio.Reader) {
				first := true
				for u.read(n, br) {
					resp := "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nright"
					if first && n == 1 {
						resp = tc.first
					}
					first = false
					if _, err := io.WriteString(c, resp); err != nil {
						return
					}
				}
			})
			g, gw := newTestGateway(t, directConfig, up.url())
			client := &http.Client{Transport: &http.Transport{}, Timeout: failAfter}
			defer client.CloseIdleConnections()
			if _, _, err := tryFetch(client, tc.method, gw.URL+"/one"); err != nil {
				t.Fatalf("first request: %v", err)
			}
			for i := range 3 {
				status, body, _ := fetch(t, client, "GET", gw.URL+"/next")
				if status != 200 || body != "right" {
					t.Fatalf("request %d after the extra bytes: %d %q, want 200 \"right\"", i, status, body)
				}
			}
			up.waitClosed(t, 1)
			if got := directOf(g).dials.Load(); got != 2 {
				t.Errorf("%d upstream connections, want 2 (the first dropped, the second reused)", got)
			}
		})
	}
}

// TestSwitchingProtocolsToAPlainRequestIs502: a 101 to a request
// that asked for no upgrade would turn the connection into a tunnel; it
// is refused (502), its connection closed, and the next request answered
// on a fresh one.
func TestSwitchingProtocolsToAPlainRequestIs502(t *testing.T) {
	up := newRawUpstream(t, func(u *rawUpstream, n int, c net.Conn, br *bufio.Reader) {
		first := true
		for u.read(n, br) {
			resp := "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nright"
			if first && n == 1 {
				resp = "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n" +
					"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nWRONG"
			}
			first = false
			if _, err := io.WriteString(c, resp); err != nil {
				return
			}
		}
	})
	_, gw := newTestGateway(t, directConfig, up.url())
	client := &http.Client{Transport: &http.Transport{}, Timeout: failAfter}
	defer client.CloseIdleConnections()
	if status, _, _ := fetch(t, client, "GET", gw.URL+"/one"); status != http.StatusBadGateway {
		t.Fatalf("101 to a plain GET: %d, want 502", status)
	}
	up.waitClosed(t, 1)
	if status, body, _ := fetch(t, client, "GET", gw.URL+"/two"); status != 200 || body != "right" {
		t.Fatalf("the next request: %d %q", status, body)
	}
}

// TestOversizedResponseHeaderIs502AndDropsTheConnection: a
// header past the 10 MiB bound is refused, and whatever the upstream
// still has to send is never read as the next answer.
func TestOversizedResponseHeaderIs502AndDropsTheConnection(t *testing.T) {
	big := "HTTP/1.1 200 OK\r\nX-Big: " + strings.Repeat("a", maxResponseHeaderBytes+1) + "\r\nContent-Length: 5\r\n\r\nWRONG"
	up := newRawUpstream(t, func(u *rawUpstream, n int, c net.Conn, br *bufio.Reader) {
		first := true
		for u.read(n, br) {
			resp := "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nright"
			if first && n == 1 {
				resp = big
			}
			first = false
			if _, err := io.WriteString(c, resp); err != nil {
				return
			}
		}
	})
	_, gw := newTestGateway(t, directConfig, up.url())
	client := &http.Client{Transport: &http.Transport{}, Timeout: failAfter}
	defer client.CloseIdleConnections()
	if status, _, _ := fetch(t, client, "GET", gw.URL+"/one"); status != http.StatusBadGateway {
		t.Fatalf("an oversized header: %d, want 502", status)
	}
	up.waitClosed(t, 1)
	if status, body, _ := fetch(t, client, "GET", gw.URL+"/two"); status != 200 || body != "right" {
		t.Fatalf("the next request: %d %q", status, body)
	}
}

// TestStalledBodyCutByReadTimeoutIsNotPooled: a body that stalls
// past read_timeout_ms ends the response; its connection, with the rest of
// the body still owed, is closed, and the next request is answered on a
// fresh one.
func TestStalledBodyCutByReadTimeoutIsNotPooled(t *testing.T) {
	up := newRawUpstream(t, func(u *rawUpstream, n int, c net.Conn, br *bufio.Reader) {
		first := true
		for u.read(n, br) {
			resp := "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nright"
			if first && n == 1 {
				resp = "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc"
			}
			first = false
			if _, err := io.WriteString(c, resp); err != nil {
				return
			}
		}
	})
	g, gw := newTestGateway(t, directConfig+"proxy:\n  read_timeout_ms: 300\n", up.url())
	client := &http.Client{Transport: &http.Transport{}, Timeout: failAfter}
	defer client.CloseIdleConnections()
	if _, body, err := tryFetch(client, "GET", gw.URL+"/one"); err == nil {
		t.Fatalf("a body cut by read_timeout_ms reached the client whole: %q", body)
	}
	up.waitClosed(t, 1)
	if status, body, _ := fetch(t, client, "GET", gw.URL+"/two"); status != 200 || body != "right" {
		t.Fatalf("the next request: %d %q", status, body)
	}
	if got := directOf(g).dials.Load(); got != 2 {
		t.Errorf("%d upstream connections, want 2", got)
	}
}

// TestMisbehavingUpstreamUnderConcurrencyNeverMixesResponses:
// many clients at once against an upstream that, request by request,
// answers correctly, with a chunked or a close-delimited body, asks to
// close, sends a second unasked response (or bytes past its Content-Length)
// in the same write, or closes a reused connection before answering. A
// client may get a 502; it never gets a 200 whose body answers another
// request, and the upstream never sees a request more than twice (the
// one retry of a stale connection).
func TestMisbehavingUpstreamUnderConcurrencyNeverMixesResponses(t *testing.T) {
	var mu sync.Mutex
	seen := map[string]int{}
	up := newRawUpstream(t, func(u *rawUpstream, n int, c net.Conn, br *bufio.Reader) {
		for served := 0; ; served++ {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			id := strings.TrimPrefix(req.URL.Path, "/p/")
			mu.Lock()
			seen[id]++
			mu.Unlock()
			k, _ := strconv.Atoi(id)
			var resp string
			closeAfter := false
			switch k % 7 {
			case 0:
				resp = fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(id), id)
			case 1:
				resp = fmt.Sprintf("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n", len(id), id)
			case 2:
				resp, closeAfter = "HTTP/1.1 200 OK\r\n\r\n"+id, true
			case 3:
				resp = fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(id), id) +
					"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nWRONG"
			case 4:
				resp, closeAfter = fmt.Sprintf("HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s", len(id), id), true
			case 5:
				if served > 0 {
					return // a stale reused connection: closed, nothing answered
				}
				resp = fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(id), id)
			case 6:
				resp = fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%sWRONG", len(id), id)
			}
			if _, err := io.WriteString(c, resp); err != nil || closeAfter {
				return
			}
		}
	})
	_, gw := newTestGateway(t, directConfig, up.url())
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}, Timeout: failAfter}
	defer client.CloseIdleConnections()
	const workers, each = 8, 40
	var wg sync.WaitGroup
	errs := make(chan error, workers*each)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				id := strconv.Itoa(w*each + i)
				status, body, err := tryFetch(client, "GET", gw.URL+"/p/"+id)
				switch {
				case err != nil:
					errs <- fmt.Errorf("request %s: %v", id, err)
				case status == 200 && body != id:
					errs <- fmt.Errorf("request %s got the body %q: another request's answer", id, body)
				case status != 200 && status != http.StatusBadGateway:
					errs <- fmt.Errorf("request %s: status %d", id, status)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	mu.Lock()
	defer mu.Unlock()
	for id, n := range seen {
		if n > 2 {
			t.Errorf("the upstream saw request %s %d times", id, n)
		}
	}
}

// TestIdlePoolIsBounded: the pool keeps at most maxUpstreamIdle
// connections and closes the rest as they come back; retiring the
// configuration closes every pooled one.
func TestIdlePoolIsBounded(t *testing.T) {
	u, _ := url.Parse("http://127.0.0.1:1")
	pc := proxyConfig{dialTimeout: time.Second} // no idle timeout: no sweep to race with
	tr := newUpstreamTransport(u, pc, newTransport(pc))
	const extra = 5
	peers := make([]net.Conn, 0, maxUpstreamIdle+extra)
	for range maxUpstreamIdle + extra {
		a, b := net.Pipe()
		peers = append(peers, b)
		tr.put(&upstreamConn{t: tr, conn: a})
	}
	t.Cleanup(func() {
		for _, p := range peers {
			p.Close()
		}
	})
	tr.mu.Lock()
	n := len(tr.idle)
	tr.mu.Unlock()
	if n != maxUpstreamIdle {
		t.Fatalf("%d idle connections pooled, want %d", n, maxUpstreamIdle)
	}
	closed := func(c net.Conn) bool {
		_ = c.SetReadDeadline(time.Now().Add(time.Millisecond))
		_, err := c.Read(make([]byte, 1))
		return errors.Is(err, io.EOF)
	}
	for i, p := range peers {
		if want := i >= maxUpstreamIdle; closed(p) != want {
			t.Fatalf("connection %d: closed %v, want %v", i, !want, want)
		}
	}
	tr.CloseIdleConnections()
	for i, p := range peers[:maxUpstreamIdle] {
		if !closed(p) {
			t.Fatalf("connection %d still open after CloseIdleConnections", i)
		}
	}
}

// TestConnectionFinishingAfterReloadIsClosedWhenRetired: a
// response still streaming when the configuration is replaced puts its
// connection back into the retired configuration's pool at its end; the
// retirement, which waits for that request, then closes it: no connection
// outlives its configuration. The body is chunked so that ReverseProxy
// flushes its first piece, and the client has the header, while the
// upstream holds the rest.
func TestConnectionFinishingAfterReloadIsClosedWhenRetired(t *testing.T) {
	release := make(chan struct{})
	var releaseOnce sync.Once
	unblock := func() { releaseOnce.Do(func() { close(release) }) }
	up := newRawUpstream(t, func(u *rawUpstream, n int, c net.Conn, br *bufio.Reader) {
		for u.read(n, br) {
			if _, err := io.WriteString(c, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n"); err != nil {
				return
			}
			<-release
			if _, err := io.WriteString(c, "3\r\ndef\r\n0\r\n\r\n"); err != nil {
				return
			}
		}
	})
	t.Cleanup(unblock) // runs before the upstream's cleanup waits for it
	g, gw := newTestGateway(t, directConfig, up.url())
	client := &http.Client{Transport: &http.Transport{}, Timeout: failAfter}
	defer client.CloseIdleConnections()
	res, err := client.Get(gw.URL + "/streaming")
	if err != nil {
		t.Fatal(err)
	}
	old := directOf(g)
	c, err := parseConfig([]byte(directConfig))
	if err != nil {
		t.Fatal(err)
	}
	if err := g.load(c); err != nil {
		t.Fatal(err)
	}
	unblock()
	b, err := io.ReadAll(res.Body)
	res.Body.Close()
	if err != nil || string(b) != "abcdef" {
		t.Fatalf("the streaming response: %q, %v", b, err)
	}
	up.waitClosed(t, 1)
	old.mu.Lock()
	idle := len(old.idle)
	old.mu.Unlock()
	if idle != 0 {
		t.Errorf("%d connections left in the retired configuration's pool", idle)
	}
	if status, body, _ := fetch(t, client, "GET", gw.URL+"/next"); status != 200 || body != "abcdef" {
		t.Fatalf("a request after the reload: %d %q", status, body)
	}
}

// TestDirectPathForwardsTheHeadersTransportWould: the upstream
// sees the same request headers on the direct path as on http.Transport's:
// hop-by-hop headers and those Connection names dropped, the client's
// forwarding claims replaced by what the gateway saw.
func TestDirectPathForwardsTheHeadersTransportWould(t *testing.T) {
	var mu sync.Mutex
	var got []http.Header
	up := newRawUpstream(t, func(u *rawUpstream, n int, c net.Conn, br *bufio.Reader) {
		for {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			_, _ = io.Copy(io.Discard, req.Body)
			mu.Lock()
			got = append(got, req.Header)
			mu.Unlock()
			if _, err := io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"); err != nil {
				return
			}
		}
	})
	g, gw := newTestGateway(t, directConfig, up.url())
	client := &http.Client{Transport: &http.Transport{}, Timeout: failAfter}
	defer client.CloseIdleConnections()
	send := func(body io.Reader) {
		req, _ := http.NewRequest("GET", gw.URL+"/h", body)
		req.Header.Set("Connection", "X-Secret")
		req.Header.Set("X-Secret", "1")
		req.Header.Set("Keep-Alive", "timeout=5")
		req.Header.Set("Proxy-Connection", "keep-alive")
		req.Header.Set("X-Forwarded-For", "6.6.6.6")
		req.Header.Set("X-Real-Ip", "6.6.6.6")
		req.Header.Set("X-Kept", "yes")
		res, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if res.StatusCode != 200 {
			t.Fatalf("status %d", res.StatusCode)
		}
	}
	send(nil)                       // direct path
	send(strings.NewReader("body")) // a body: http.Transport's path
	if n := directOf(g).stdTrips.Load(); n != 1 {
		t.Fatalf("%d requests on http.Transport's path, want 1", n)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 2 {
		t.Fatalf("upstream saw %d requests", len(got))
	}
	direct, std := got[0].Clone(), got[1].Clone()
	std.Del("Content-Length")
	if fmt.Sprint(direct) != fmt.Sprint(std) {
		t.Errorf("direct path sent\n%v\nhttp.Transport sent\n%v", direct, std)
	}
	for _, k := range []string{"X-Secret", "Keep-Alive", "Proxy-Connection", "Connection", "X-Real-Ip"} {
		if v := direct.Values(k); len(v) != 0 {
			t.Errorf("the upstream got %s: %q", k, v)
		}
	}
	if v := direct.Get("X-Forwarded-For"); v != "127.0.0.1" {
		t.Errorf("X-Forwarded-For %q, want 127.0.0.1", v)
	}
	if v := direct.Get("X-Kept"); v != "yes" {
		t.Errorf("X-Kept %q, want yes", v)
	}
}

// TestCloseIdleConnectionsDuringTrafficLosesNoRequest: closing
// the idle connections (a reload) while requests run takes only pooled
// ones, never one serving a request: every request is answered, each with
// its own answer.
func TestCloseIdleConnectionsDuringTrafficLosesNoRequest(t *testing.T) {
	up := newRawUpstream(t, func(u *rawUpstream, n int, c net.Conn, br *bufio.Reader) {
		for {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			p := req.URL.Path
			if _, err := fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(p), p); err != nil {
				return
			}
		}
	})
	g, gw := newTestGateway(t, directConfig, up.url())
	tr := directOf(g)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 8}, Timeout: failAfter}
	defer client.CloseIdleConnections()
	stop := make(chan struct{})
	closer := make(chan struct{})
	go func() {
		defer close(closer)
		for {
			select {
			case <-stop:
				return
			default:
				tr.CloseIdleConnections()
				time.Sleep(100 * time.Microsecond)
			}
		}
	}()
	var wg sync.WaitGroup
	errs := make(chan error, 4*50)
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 50 {
				p := fmt.Sprintf("/w%d/%d", w, i)
				status, body, err := tryFetch(client, "GET", gw.URL+p)
				if err != nil || status != 200 || body != p {
					errs <- fmt.Errorf("%s: %d %q %v", p, status, body, err)
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	<-closer
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestReusedConnectionResetBeforeAnswerIsRetriedOnce: a reused
// connection the upstream resets (RST, not FIN) after reading the request
// and before any byte of the answer is the keep-alive race too: the GET
// goes once more on a fresh connection, and only once.
func TestReusedConnectionResetBeforeAnswerIsRetriedOnce(t *testing.T) {
	up := newRawUpstream(t, func(u *rawUpstream, n int, c net.Conn, br *bufio.Reader) {
		for served := 0; u.read(n, br); served++ {
			if n == 1 && served == 1 {
				_ = c.(*net.TCPConn).SetLinger(0)
				return // the deferred Close resets the connection
			}
			if _, err := io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"); err != nil {
				return
			}
		}
	})
	g, gw := newTestGateway(t, directConfig, up.url())
	client := &http.Client{Transport: &http.Transport{}, Timeout: failAfter}
	defer client.CloseIdleConnections()
	for _, p := range []string{"/one", "/two"} {
		if status, body, _ := fetch(t, client, "GET", gw.URL+p); status != 200 || body != "ok" {
			t.Fatalf("%s: %d %q", p, status, body)
		}
	}
	want := []string{"conn 1: GET /one", "conn 1: GET /two", "conn 2: GET /two"}
	if got := up.requests(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("upstream saw %q, want %q", got, want)
	}
	if got := directOf(g).dials.Load(); got != 2 {
		t.Errorf("%d upstream connections, want 2", got)
	}
}

// TestUnreadBodyConnectionClosedWhenContextEnds: a response
// whose body is neither read to its end nor closed (a caller that
// panicked between RoundTrip and its deferred Close, as ReverseProxy does
// on a status WriteHeader refuses) holds its upstream connection; once the
// request's context ends, the connection is closed, as http.Transport
// closes it, not left open until a finalizer finds it.
func TestUnreadBodyConnectionClosedWhenContextEnds(t *testing.T) {
	for _, direct := range []bool{true, false} {
		name := "http.Transport"
		if direct {
			name = "direct path"
		}
		t.Run(name, func(t *testing.T) {
			up := newRawUpstream(t, func(u *rawUpstream, n int, c net.Conn, br *bufio.Reader) {
				if !u.read(n, br) {
					return
				}
				_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc")
				u.read(n, br) // returns when the gateway closes the connection
			})
			u, _ := url.Parse(up.url())
			pc := proxyConfig{dialTimeout: 10 * time.Second, idleConnTimeout: time.Minute}
			std := newTransport(pc)
			tr := newUpstreamTransport(u, pc, std)
			defer tr.CloseIdleConnections()
			var rt http.RoundTripper = tr
			if !direct {
				rt = std
			}
			ctx, cancel := context.WithCancel(context.Background())
			req, _ := http.NewRequestWithContext(ctx, "GET", up.url()+"/x", nil)
			res, err := rt.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			if direct && tr.dials.Load() != 1 {
				t.Fatal("the request did not take the direct path")
			}
			cancel()
			up.waitClosedWithin(t, 1, 10*time.Second)
			// res stays reachable until here: the finalizer of its
			// connection must not be what closes it.
			if res.StatusCode != 200 {
				t.Fatalf("status %d", res.StatusCode)
			}
		})
	}
}
