package httplimit

import (
	"net/http"
	"net/http/httptest"
	"path"
	"strings"
	"testing"
	"time"
)

func TestRoutePathTable(t *testing.T) {
	for in, want := range map[string]string{
		"": "/", "/": "/", "/a/b": "/a/b", "/A/B/": "/a/b", `\a\b`: "/a/b", "/a;x=1/b;y": "/a/b",
		"/a/..;/b": "/b", "a": "/a", "/a/./b//c": "/a/b/c", "/..": "/",
		// Trailing dots and whitespace per segment; a dot segment survives.
		"/login ": "/login", "/login\t": "/login", "/login..": "/login", "/login. .": "/login",
		"/a./b ": "/a/b", "/x/.. /login": "/login", "/x/... /y": "/x/y", "/a b": "/a b",
		// NUL ends the path; escapes are decoded until none is left.
		"/login\x00.php": "/login", "/%6cogin": "/login", "/%256cogin": "/login", "/%25252e%25252e/x": "/x",
		"/100%": "/100%", "/a%2": "/a%2", "/%zz": "/%zz", "/%2F%2e%2E%2flogin": "/login",
		// "?" and "#" once decoded end the path; Unicode spellings fold.
		"/login?x": "/login", "/a#b": "/a", "/login%253fx": "/login", "/login\u00a0": "/login",
		"/\u200blog\ufeffin": "/login", "/ｌｏｇｉｎ": "/login", "/x\xc0\xaflogin": "/x/login",
		"/a\xffb": "/a\ufffdb", "/%\u200b41": "/a", "/\xc0\xa5": "/\ufffd\ufffd",
	} {
		if got := routePath(in); got != want {
			t.Errorf("routePath(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestPathSpellingsServersStripFallUnderTheRule: with the login quota
// spent, each spelling that IIS or older Spring routes to /login (trailing
// whitespace or dots, a NUL, an escape left for a second decoding) was
// admitted and passed on; each must be refused by the login rule.
func TestPathSpellingsServersStripFallUnderTheRule(t *testing.T) {
	m := mustNew(t, Options{Rules: []Rule{
		{Name: "login", Method: "POST", PathPrefix: "/login", Engine: logConfig(1, time.Minute, newClock())},
	}})
	h := m.Handler(okHandler)
	if rec := serveRec(h, "POST", "/login", "", nil); rec.Code != 200 {
		t.Fatalf("first login: %d, want 200", rec.Code)
	}
	for _, target := range []string{
		"/login%20", "/login%09", "/login%00", "/login..", "/login%20.json", "/%256cogin",
		"/login.", "/LOGIN%20%20", "/login%0d%0a", "/login%2520", "/x/..%20/login", "/login%00/../other",
		"/login%2e", "/login%252e%252e",
	} {
		if rec := serveRec(h, "POST", target, "", nil); rec.Code != 429 {
			t.Errorf("POST %s after the quota was spent: %d, want 429 (policy %q)", target, rec.Code, rec.Header().Get("RateLimit-Policy"))
		}
	}
	for _, target := range []string{"/logi%20n", "/loginx%20", "/%20login", "/log/in"} {
		if p := policyOf(h, "POST", target); p != "" {
			t.Errorf("POST %s matched %q, want no rule", target, p)
		}
	}
}

// TestSuffixQueryAndUnicodeSpellingsFallUnderTheRule: with the login
// quota spent, a reviewer's spellings reached the upstream: a suffix of
// several dots (Spring's suffix patterns route "/login.x.y" to
// "/login.*"), an escaped "?" or "#" (a component that decodes again
// routes "/login%3fx" to /login), trailing Unicode whitespace,
// zero-width characters, fullwidth letters and overlong UTF-8. Each must
// be refused by the login rule.
func TestSuffixQueryAndUnicodeSpellingsFallUnderTheRule(t *testing.T) {
	m := mustNew(t, Options{Rules: []Rule{
		{Name: "login", Method: "POST", PathPrefix: "/login", Engine: logConfig(1, time.Minute, newClock())},
		{Name: "json", Method: "POST", PathPrefix: "/export.json", Engine: logConfig(1, time.Minute, newClock())},
	}})
	h := m.Handler(okHandler)
	for _, target := range []string{"/login", "/export.json"} {
		if rec := serveRec(h, "POST", target, "", nil); rec.Code != 200 {
			t.Fatalf("first POST %s: %d, want 200", target, rec.Code)
		}
	}
	for _, target := range []string{
		"/login.x.y", "/login.json.json", "/login.a.b.c", "/login%2ejson.x", "/login.x.y/",
		"/login%3fx", "/login%253fx", "/login%23x", "/login%2523x", "/login%3F",
		"/login%c2%a0", "/login%c2%85", "/login%e3%80%80", "/login%e2%80%8b", "/login%ef%bb%bf",
		"/%e2%80%8blogin", "/%ef%bb%bflogin", "/%ef%bd%8c%ef%bd%8f%ef%bd%87%ef%bd%89%ef%bd%8e",
		"/%ef%bc%ac%ef%bc%af%ef%bc%a7%ef%bc%a9%ef%bc%ae", "/x%c0%af..%c0%aflogin", "/x/%c0%ae%c0%ae/login",
		"/login%c0%ae%c0%ae", "/log%e2%80%8bin", "/login%c2%ad",
		"/export.json.x", "/export.json.a.b",
	} {
		if rec := serveRec(h, "POST", target, "", nil); rec.Code != 429 {
			t.Errorf("POST %s after the quota was spent: %d, want 429 (policy %q)", target, rec.Code, rec.Header().Get("RateLimit-Policy"))
		}
	}
	for _, target := range []string{"/.login.x", "/loginx.y", "/x.login", "/login2.x", "/%c2%a0login", "/export.jsonx"} {
		if p := policyOf(h, "POST", target); p != "" {
			t.Errorf("POST %s matched %q, want no rule", target, p)
		}
	}
}

// TestRouteIPKeyIgnoresEveryFormatSuffix: each suffix of a route would be
// a fresh budget under RouteIP if only the last one were dropped.
func TestRouteIPKeyIgnoresEveryFormatSuffix(t *testing.T) {
	for in, want := range map[string]string{
		"/login.x.y": "/login", "/login.json": "/login", "/.well-known.json": "/.well-known", "/..json": "/..json",
		"/a/b.c.d": "/a/b", "/login": "/login",
	} {
		if got, _ := withoutFormat(in); got != want {
			t.Errorf("withoutFormat(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestPathOverrideHeadersFallUnderTheRule: servers that route by
// X-Original-URL or X-Rewrite-URL (IIS URL Rewrite, Symfony, Laminas) ran
// "POST /other" with "X-Original-URL: /login" as a login; such a request
// must count against the login rule.
func TestPathOverrideHeadersFallUnderTheRule(t *testing.T) {
	m := mustNew(t, Options{Rules: []Rule{
		{Name: "login", Method: "POST", PathPrefix: "/login", Engine: logConfig(1, time.Minute, newClock())},
	}})
	h := m.Handler(okHandler)
	if rec := serveRec(h, "POST", "/other", "", map[string]string{"X-Original-URL": "/login"}); rec.Code != 200 || rec.Header().Get("RateLimit-Policy") == "" {
		t.Fatalf("POST /other with X-Original-URL /login: %d, policy %q; want 200 under the login rule", rec.Code, rec.Header().Get("RateLimit-Policy"))
	}
	for _, hdr := range []map[string]string{
		{"X-Original-URL": "/login"},
		{"X-Rewrite-URL": "/LOGIN?next=/"},
		{"X-Original-URL": "http://internal/login%20"},
		{"X-Rewrite-URL": "login.json"},
		{"X-Original-URL": "/%256cogin#x"},
	} {
		if rec := serveRec(h, "POST", "/other", "", hdr); rec.Code != 429 {
			t.Errorf("POST /other with %v: %d, want 429", hdr, rec.Code)
		}
	}
	if rec := serveRec(h, "POST", "/login", "", nil); rec.Code != 429 {
		t.Errorf("POST /login after overrides spent the quota: %d, want 429", rec.Code)
	}
	if p := policyOf(h, "POST", "/other"); p != "" {
		t.Errorf("POST /other without an override matched %q", p)
	}
	if rec := serveRec(h, "POST", "/other", "", map[string]string{"X-Original-URL": "/elsewhere"}); rec.Header().Get("RateLimit-Policy") != "" {
		t.Error("an override naming another path matched the login rule")
	}
}

// TestCanonicalPathsMatchWithoutAllocating: the folding costs nothing for
// a path already in canonical form, and a request without override
// headers only looks them up.
func TestCanonicalPathsMatchWithoutAllocating(t *testing.T) {
	req := httptest.NewRequest("POST", "/api/v1/users.json", nil)
	var sink bool
	allocs := testing.AllocsPerRun(100, func() {
		p := routePath(req.URL.Path)
		sink = matchPath(p, "/api/v1/users") || overrideMatches(req, "/login")
	})
	if !sink {
		t.Fatal("/api/v1/users.json did not match /api/v1/users")
	}
	if allocs != 0 {
		t.Errorf("matching a canonical path allocates %v times, want 0", allocs)
	}
}

// FuzzRoutePath: routePath never panics, is idempotent, returns a clean
// path (one of printable ASCII without "%" or space that isRoutePath
// accepts) with no escape, NUL or segment ending in a dot or whitespace
// left, and a plain path keeps its segments (only the case folds).
func FuzzRoutePath(f *testing.F) {
	for _, s := range []string{
		"/", "/login", "/a/..;/b", `\x\..\y`, "/A;b/C.json", "//", "/.", "/..;", ";", "/%2e", "/logın", "/ſ\xff", "/ǅ/ẞ/İ",
		"/login ", "/login\x00x", "/%256cogin", "/%%32%65", "/x/.. /y", "/a.%20.", "/%", "/%2",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		c := routePath(p)
		if routePath(c) != c || path.Clean(c) != c {
			t.Fatalf("routePath(%q) = %q, not canonical", p, c)
		}
		if common(c) && !isRoutePath(c) {
			t.Fatalf("routePath(%q) = %q, which isRoutePath rejects", p, c)
		}
		if strings.IndexByte(c, 0) >= 0 {
			t.Fatalf("routePath(%q) = %q keeps a NUL", p, c)
		}
		if u, changed := unescapeOnce(c); changed {
			t.Fatalf("routePath(%q) = %q still decodes to %q", p, c, u)
		}
		for _, seg := range strings.Split(c, "/") {
			if seg != "" && seg != "." && seg != ".." && (seg[len(seg)-1] == '.' || isPathSpace(seg[len(seg)-1])) {
				t.Fatalf("routePath(%q) = %q keeps segment %q", p, c, seg)
			}
		}
		if plainPath(p, "") && strings.Trim(p, "/") != "" && strings.TrimSuffix(strings.ToLower(p), "/") != c {
			t.Fatalf("plain %q became %q", p, c)
		}
		if q, ok := withoutFormat(c); ok && (path.Clean(q) != q || common(q) && !isRoutePath(q)) {
			t.Fatalf("withoutFormat(%q) = %q, not canonical", c, q)
		}
	})
}

// common reports whether s is printable ASCII without "%" and space: the
// paths isRoutePath recognizes as canonical without rebuilding them.
func common(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] <= ' ' || s[i] >= 0x7f || s[i] == '%' {
			return false
		}
	}
	return true
}

// TestMethodSpellingsAndOverridesFallUnderTheRule: net/http accepts "post", and Flask or
// Rails route it as POST, so a POST rule must limit it (it escaped the
// example's login rule). A GET rule also takes HEAD.
func TestMethodSpellingsAndOverridesFallUnderTheRule(t *testing.T) {
	clk := newClock()
	m := mustNew(t, Options{Rules: []Rule{
		{Name: "login", Method: "POST", PathPrefix: "/login", Engine: logConfig(3, time.Minute, clk)},
		{Name: "reads", Method: "get", PathPrefix: "/r", Engine: logConfig(1, time.Minute, clk)},
	}})
	h := m.Handler(okHandler)
	for i, method := range []string{"POST", "post", "Post"} {
		if rec := serveRec(h, method, "/login", "", nil); rec.Code != 200 || rec.Header().Get("RateLimit-Policy") == "" {
			t.Fatalf("%s /login (%d of 3): %d, policy %q; want 200 under the login rule", method, i+1, rec.Code, rec.Header().Get("RateLimit-Policy"))
		}
	}
	if rec := serveRec(h, "pOsT", "/login", "", nil); rec.Code != 429 {
		t.Errorf("4th login spelled pOsT: %d, want 429", rec.Code)
	}
	if rec := serveRec(h, "HEAD", "/r", "", nil); rec.Code != 200 || rec.Header().Get("RateLimit-Policy") == "" {
		t.Errorf("HEAD under a GET rule: %d %q, want limited", rec.Code, rec.Header().Get("RateLimit-Policy"))
	}
	if rec := serveRec(h, "GET", "/r", "", nil); rec.Code != 429 {
		t.Errorf("GET after HEAD spent the GET rule's unit: %d, want 429", rec.Code)
	}
	if rec := serveRec(h, "PUT", "/login", "", nil); rec.Header().Get("RateLimit-Policy") != "" {
		t.Error("PUT matched a POST rule")
	}
	// A POST that an upstream takes for GET (method-override header) is a GET.
	if rec := serveRec(h, "POST", "/r", "", map[string]string{"X-HTTP-Method-Override": "get"}); rec.Code != 429 {
		t.Errorf("POST overridden to GET: %d, want 429 under the GET rule", rec.Code)
	}
	if _, err := New(Options{Rules: []Rule{{Name: "x", Method: "PO ST", Engine: logConfig(1, time.Minute, clk)}}}); err == nil {
		t.Error(`Method "PO ST" accepted`)
	}

	// route_ip keys: respelling the method is the same route.
	k := RouteIP(func(*http.Request) (string, error) { return "192.0.2.1", nil })
	a, _ := k(httptest.NewRequest("POST", "/login", nil))
	b, _ := k(httptest.NewRequest("post", "/LOGIN;jsessionid=7", nil))
	if a != b {
		t.Errorf("RouteIP keys differ by spelling: %q vs %q", a, b)
	}
}

// TestPathSpellingsUpstreamsRouteAlikeFallUnderTheRule: every spelling some common upstream
// routes to /login (case, servlet ;params and "..;", backslashes, a Rails
// format suffix, dot segments) falls under the /login rule.
func TestPathSpellingsUpstreamsRouteAlikeFallUnderTheRule(t *testing.T) {
	m := mustNew(t, Options{Rules: []Rule{
		{Name: "login", PathPrefix: "/login", Engine: logConfig(1000, time.Minute, newClock())},
		{Name: "api", PathPrefix: "/API/v1", Engine: logConfig(1000, time.Minute, newClock())},
	}})
	h := m.Handler(okHandler)
	for _, target := range []string{
		"/login", "/LOGIN", "/Login/", "/login;jsessionid=1", "/login.json", "/login/x.json",
		"/x/..;/login", "/x/%2e%2e;/login", `/x/..%5clogin`, "//login", "/./login", "/login;a=b/step2",
		"/api/v1/users", "/API/V1", "/api/v1.json",
		"/log%C4%B1n", "/LOG%C4%B0N", // dotless and dotted I: ASP.NET's invariant upper case makes them /login
	} {
		if policyOf(h, "POST", target) == "" {
			t.Errorf("POST %s escaped every rule", target)
		}
	}
	for _, target := range []string{"/loginx", "/logins.json", "/api.v1/users", "/api/v2", "/.login"} {
		if p := policyOf(h, "POST", target); p != "" {
			t.Errorf("POST %s matched %q, want no rule", target, p)
		}
	}
}
