package httplimit

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"
)

func mustPrefixes(t testing.TB, ss ...string) []netip.Prefix {
	t.Helper()
	var ps []netip.Prefix
	for _, s := range ss {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			t.Fatal(err)
		}
		ps = append(ps, p)
	}
	return ps
}

// keyServer starts a real server that answers each request with the key k
// computes for it (or "error: ...").
func keyServer(t *testing.T, k KeyFunc) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key, err := k(r)
		if err != nil {
			key = "error: " + err.Error()
		}
		_, _ = io.WriteString(w, key)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// hdrLines is a request's header lines, sent in order (repeated names
// become separate lines).
type hdrLines [][2]string

func keyOf(t *testing.T, url string, lines hdrLines) string {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range lines {
		req.Header.Add(l[0], l[1])
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestClientIPTrustedProxyChain(t *testing.T) {
	// The test client connects from 127.0.0.1, which plays the trusted
	// edge proxy; 10/8 are trusted inner proxies.
	trusted := mustPrefixes(t, "127.0.0.0/8", "10.0.0.0/8")
	newKey := func(header string) KeyFunc {
		k, err := ClientIP(IPConfig{TrustedProxies: trusted, Header: header})
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	xff := keyServer(t, newKey(""))
	fwd := keyServer(t, newKey("forwarded"))
	real := keyServer(t, newKey("X-Real-IP"))

	for _, tc := range []struct {
		name  string
		srv   *httptest.Server
		lines hdrLines
		want  string
	}{
		{"no header: the peer", xff, nil, "127.0.0.1"},
		{"one hop", xff, hdrLines{{"X-Forwarded-For", "203.0.113.7"}}, "203.0.113.7"},
		{"trusted hop skipped", xff, hdrLines{{"X-Forwarded-For", "203.0.113.7, 10.1.1.1"}}, "203.0.113.7"},
		{"spoofed leftmost ignored", xff, hdrLines{{"X-Forwarded-For", "198.51.100.9, 203.0.113.7, 10.1.1.1"}}, "203.0.113.7"},
		{"multiple lines walked as one list", xff, hdrLines{{"X-Forwarded-For", "198.51.100.9"}, {"X-Forwarded-For", "203.0.113.7,10.0.0.2"}}, "203.0.113.7"},
		{"every hop trusted: leftmost", xff, hdrLines{{"X-Forwarded-For", "10.0.0.5, 10.0.0.6"}}, "10.0.0.5"},
		{"garbage stops at the trusted hop", xff, hdrLines{{"X-Forwarded-For", "203.0.113.7, unknown, 10.0.0.6"}}, "10.0.0.6"},
		{"garbage from the edge: the peer", xff, hdrLines{{"X-Forwarded-For", "not-an-ip"}}, "127.0.0.1"},
		{"empty entries tolerated", xff, hdrLines{{"X-Forwarded-For", "203.0.113.7, , 10.0.0.6,"}}, "203.0.113.7"},
		{"port stripped", xff, hdrLines{{"X-Forwarded-For", "203.0.113.7:4711"}}, "203.0.113.7"},
		{"IPv6 grouped by /64", xff, hdrLines{{"X-Forwarded-For", "2001:db8:1:2:aaaa::1"}}, "2001:db8:1:2::"},
		{"bracketed IPv6 with port", xff, hdrLines{{"X-Forwarded-For", "[2001:db8:1:2::9]:80, 10.0.0.1"}}, "2001:db8:1:2::"},
		{"IPv4-mapped unmapped", xff, hdrLines{{"X-Forwarded-For", "::ffff:203.0.113.7"}}, "203.0.113.7"},
		{"other header not read", xff, hdrLines{{"Forwarded", "for=203.0.113.7"}, {"X-Real-IP", "203.0.113.8"}}, "127.0.0.1"},

		{"Forwarded RFC 7239 example", fwd, hdrLines{{"Forwarded", `for=192.0.2.60;proto=http;by=203.0.113.43, for="[2001:db8:cafe::17]:4711"`}}, "2001:db8:cafe::"},
		{"Forwarded walks past trusted", fwd, hdrLines{{"Forwarded", "for=198.51.100.1, For=203.0.113.7;proto=https, for=10.0.0.1"}}, "203.0.113.7"},
		{"Forwarded obfuscated node stops", fwd, hdrLines{{"Forwarded", `for="_hidden", for=10.0.0.1`}}, "10.0.0.1"},
		{"Forwarded element without for", fwd, hdrLines{{"Forwarded", "proto=https;by=10.0.0.9"}}, "127.0.0.1"},
		{"Forwarded: XFF not read", fwd, hdrLines{{"X-Forwarded-For", "203.0.113.7"}}, "127.0.0.1"},

		{"X-Real-IP", real, hdrLines{{"X-Real-IP", "203.0.113.7"}, {"X-Forwarded-For", "198.51.100.1"}}, "203.0.113.7"},
		{"X-Real-IP garbage: the peer", real, hdrLines{{"X-Real-IP", "nope"}}, "127.0.0.1"},
	} {
		if got := keyOf(t, tc.srv.URL, tc.lines); got != tc.want {
			t.Errorf("%s: key %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestIPv6ClientsInOnePrefixShareABudget(t *testing.T) {
	key, err := ClientIP(IPConfig{TrustedProxies: mustPrefixes(t, "127.0.0.1/32")})
	if err != nil {
		t.Fatal(err)
	}
	srv, _ := serve(t, Options{Key: key, Default: &Rule{Name: "v6", Engine: logConfig(2, time.Minute, newClock())}})
	xff := func(a string) map[string]string { return map[string]string{"X-Forwarded-For": a} }
	// One host rotating through its /64 gets two requests in all.
	for i, a := range []string{"2001:db8:0:1::1", "2001:db8:0:1:ffff:ffff:ffff:ffff", "2001:db8:0:1:1234::5"} {
		want := 200
		if i == 2 {
			want = 429
		}
		if r := do(t, "GET", srv.URL, xff(a)); r.status != want {
			t.Fatalf("request %d from %s: %d, want %d", i, a, r.status, want)
		}
	}
	// The neighbouring /64 has its own budget.
	if r := do(t, "GET", srv.URL, xff("2001:db8:0:2::1")); r.status != 200 {
		t.Fatalf("other /64: %d, want 200", r.status)
	}
}

func TestClientIPPrefixes(t *testing.T) {
	for _, tc := range []struct {
		cfg        IPConfig
		remoteAddr string
		want       string
	}{
		{IPConfig{}, "192.0.2.1:1234", "192.0.2.1"},
		{IPConfig{}, "[2001:db8:1:2:3:4:5:6]:80", "2001:db8:1:2::"},
		{IPConfig{}, "[::ffff:192.0.2.1]:80", "192.0.2.1"},
		{IPConfig{}, "[fe80::1%eth0]:80", "fe80::"},
		{IPConfig{IPv6Prefix: 48}, "[2001:db8:1:2:3:4:5:6]:80", "2001:db8:1::"},
		{IPConfig{IPv6Prefix: 128}, "[2001:db8:1:2:3:4:5:6]:80", "2001:db8:1:2:3:4:5:6"},
		{IPConfig{IPv4Prefix: 24}, "192.0.2.77:80", "192.0.2.0"},
		// A trusted IPv4-mapped prefix covers the plain IPv4 peer.
		{IPConfig{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("::ffff:10.0.0.0/104")}}, "10.0.0.1:80", "203.0.113.5"},
	} {
		k, err := ClientIP(tc.cfg)
		if err != nil {
			t.Fatal(err)
		}
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = tc.remoteAddr
		r.Header.Set("X-Forwarded-For", "203.0.113.5")
		got, err := k(r)
		if err != nil || got != tc.want {
			t.Errorf("%+v %s: %q, %v; want %q", tc.cfg, tc.remoteAddr, got, err, tc.want)
		}
	}
}

func TestClientIPErrors(t *testing.T) {
	k, err := ClientIP(IPConfig{})
	if err != nil {
		t.Fatal(err)
	}
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = "@" // what a Unix socket listener reports
	if _, err := k(r); !errors.Is(err, ErrBadRemoteAddr) {
		t.Errorf("RemoteAddr @: err %v, want ErrBadRemoteAddr", err)
	}
	for _, cfg := range []IPConfig{
		{IPv4Prefix: 33}, {IPv4Prefix: -1}, {IPv6Prefix: 129}, {Header: "X-Client-IP"},
		{TrustedProxies: []netip.Prefix{{}}},
	} {
		if _, err := ClientIP(cfg); !errors.Is(err, ErrInvalidOptions) {
			t.Errorf("ClientIP(%+v): err %v, want ErrInvalidOptions", cfg, err)
		}
	}
}

func TestRouteIP(t *testing.T) {
	ip, err := ClientIP(IPConfig{})
	if err != nil {
		t.Fatal(err)
	}
	k := RouteIP(ip)
	r := httptest.NewRequest("POST", "/a/../login", nil)
	r.RemoteAddr = "192.0.2.1:9"
	if got, err := k(r); err != nil || got != "POST /login 192.0.2.1" {
		t.Errorf("RouteIP = %q, %v", got, err)
	}
	r.URL.Path = "/" + strings.Repeat("a", MaxKeyLen)
	if _, err := k(r); !errors.Is(err, ErrKeyTooLong) {
		t.Errorf("long path: err %v, want ErrKeyTooLong", err)
	}
	r.RemoteAddr = "bad"
	if _, err := k(r); !errors.Is(err, ErrBadRemoteAddr) {
		t.Errorf("bad RemoteAddr: err %v, want ErrBadRemoteAddr", err)
	}
}

// FuzzClientIP checks that no RemoteAddr or forwarding header makes the key
// function panic, and that an untrusted peer is always keyed by itself.
func FuzzClientIP(f *testing.F) {
	f.Add("127.0.0.1:80", "203.0.113.7, 10.0.0.1", `for="[2001:db8::1]:80";proto=https`)
	f.Add("10.0.0.1:80", "[::1", `for=`)
	f.Add("[::1]:80", ",,,", `for="`)
	f.Add("192.0.2.1:1", "", "")
	trusted := []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("::1/128")}
	var keys []KeyFunc
	for _, h := range []string{HeaderXForwardedFor, HeaderForwarded, HeaderXRealIP} {
		k, err := ClientIP(IPConfig{TrustedProxies: trusted, Header: h, IPv4Prefix: 24, IPv6Prefix: 56})
		if err != nil {
			f.Fatal(err)
		}
		keys = append(keys, k)
	}
	f.Fuzz(func(t *testing.T, remote, xff, fwd string) {
		r := &http.Request{RemoteAddr: remote, Header: http.Header{
			"X-Forwarded-For": {xff}, "Forwarded": {fwd}, "X-Real-Ip": {xff},
		}}
		for _, k := range keys {
			got, err := k(r)
			peer, perr := netip.ParseAddrPort(remote)
			if perr != nil {
				continue // may or may not parse after unmapping; must only not panic
			}
			if err != nil {
				t.Fatalf("RemoteAddr %q parses but key failed: %v", remote, err)
			}
			a := peer.Addr().Unmap().WithZone("")
			untrusted := true
			for _, p := range trusted {
				untrusted = untrusted && !p.Contains(a)
			}
			bits := 24
			if a.Is6() {
				bits = 56
			}
			if p, _ := a.Prefix(bits); untrusted && got != p.Addr().String() {
				t.Fatalf("untrusted peer %q keyed %q, want %q", remote, got, p.Addr())
			}
		}
	})
}

// TestRouteIPSharesOneBudgetAcrossPathOverrides checks that a client cannot
// buy fresh route keys by varying either path of a request that carries a
// path-override header: which one its upstream routes by is unknown.
func TestRouteIPSharesOneBudgetAcrossPathOverrides(t *testing.T) {
	ip, err := ClientIP(IPConfig{})
	if err != nil {
		t.Fatal(err)
	}
	k := RouteIP(ip)
	seen := map[string]bool{}
	for _, tc := range []struct{ line, header, value string }{
		{"/other1", "X-Original-URL", "/login"},
		{"/other2", "X-Original-URL", "/login"},
		{"/login", "X-Original-URL", "/x1"},
		{"/login", "X-Rewrite-URL", "/x2"},
		{"/login", "X-Original-URL", "http://h/login?a=1"},
	} {
		r := httptest.NewRequest("POST", tc.line, nil)
		r.RemoteAddr = "192.0.2.1:9"
		r.Header.Set(tc.header, tc.value)
		got, err := k(r)
		if err != nil {
			t.Fatal(err)
		}
		seen[got] = true
	}
	if len(seen) != 1 {
		t.Errorf("override requests got %d distinct route keys %v, want 1", len(seen), seen)
	}
	r := httptest.NewRequest("POST", "/login", nil)
	r.RemoteAddr = "192.0.2.1:9"
	if got, _ := k(r); seen[got] {
		t.Errorf("plain /login shares the override key %q", got)
	}
}
