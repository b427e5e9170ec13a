package httplimit

import (
	"net/http"
	"path"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Request paths and methods are matched the way the most lenient common
// upstream routes them, because a rule the client can step around by
// spelling is no rule: a request that one server routes to /login must
// count against a /login rule whatever spelling reached the gateway.
// Matching broadly can only limit more requests, never fewer. The
// spellings folded together:
//
//   - letter case: Express, ASP.NET and IIS route case-insensitively by
//     default ("/LOGIN" is "/login"), and ASP.NET compares by invariant
//     upper case, under which "/logın" (dotless i) and "/ſession" (long s)
//     are "/login" and "/session": letters are folded as lower(upper(r));
//   - path parameters: servlet containers (Tomcat, Jetty, Spring) drop
//     ";jsessionid=1" and treat "..;" as ".." ("/login;x=1" is "/login");
//   - backslashes: IIS and some frameworks read "\" as "/";
//   - dot segments and doubled slashes (path.Clean);
//   - a format suffix on the last segment: Rails routes "/login.json" to
//     the /login action (matchPath tries the path with and without it).
//
// Exemptions go the other way (see plainPath): only a path that every
// server reads the same is ever exempt.

// routePath returns p in the canonical form rule prefixes are compared in:
// letters folded (see above), backslashes as slashes, ";params" dropped
// from each segment, cleaned. It allocates only when p is not already
// canonical (an ASCII path in lower case, clean, without ";" or "\\").
func routePath(p string) string {
	if p == "" {
		return "/"
	}
	if isRoutePath(p) {
		return p
	}
	b := make([]byte, 0, len(p))
	inParams := false
	for i := 0; i < len(p); {
		c := p[i]
		switch {
		case c == '/' || c == '\\':
			b = append(b, '/')
			inParams = false
		case inParams:
		case c == ';':
			inParams = true
		case 'A' <= c && c <= 'Z':
			b = append(b, c+('a'-'A'))
		case c >= utf8.RuneSelf:
			r, size := utf8.DecodeRuneInString(p[i:])
			if r == utf8.RuneError && size == 1 {
				b = append(b, c) // not UTF-8: kept as is
			} else {
				b = utf8.AppendRune(b, unicode.ToLower(unicode.ToUpper(r)))
			}
			i += size
			continue
		default:
			b = append(b, c)
		}
		i++
	}
	s := string(b)
	if s == "" || s[0] != '/' {
		s = "/" + s
	}
	return path.Clean(s)
}

// isRoutePath reports whether routePath(p) == p without building it: p
// starts with "/", has no upper-case letter, non-ASCII byte, backslash,
// semicolon, empty segment, dot segment or trailing slash (except "/"
// itself). It may say false for a canonical non-ASCII path; routePath
// then rebuilds it, equal.
func isRoutePath(p string) bool {
	if p == "/" {
		return true
	}
	if len(p) == 0 || p[0] != '/' || p[len(p)-1] == '/' {
		return false
	}
	segStart := 1
	for i := 1; i <= len(p); i++ {
		if i < len(p) {
			c := p[i]
			if c == '\\' || c == ';' || 'A' <= c && c <= 'Z' || c >= utf8.RuneSelf {
				return false
			}
			if c != '/' {
				continue
			}
		}
		switch p[segStart:i] {
		case "", ".", "..":
			return false
		}
		segStart = i + 1
	}
	return true
}

// withoutFormat returns p (canonical) without the format suffix of its
// last segment ("/login.json" -> "/login"), and whether it had one. A
// leading dot ("/.well-known") is a name, not a suffix, and the result is
// always canonical.
func withoutFormat(p string) (string, bool) {
	slash := strings.LastIndexByte(p, '/')
	dot := strings.LastIndexByte(p, '.')
	if dot <= slash+1 {
		return p, false
	}
	if stem := p[slash+1 : dot]; stem == "." || stem == ".." {
		return p, false // "/..json" is no route's format variant
	}
	return p[:dot], true
}

// matchPath reports whether the canonical path p falls under the
// canonical rule prefix, with or without p's format suffix.
func matchPath(p, prefix string) bool {
	if pathHasPrefix(p, prefix) {
		return true
	}
	if q, ok := withoutFormat(p); ok {
		return pathHasPrefix(q, prefix)
	}
	return false
}

// pathHasPrefix reports whether prefix is a whole-segment prefix of p; both
// are clean paths.
func pathHasPrefix(p, prefix string) bool {
	if !strings.HasPrefix(p, prefix) {
		return false
	}
	return len(p) == len(prefix) || prefix[len(prefix)-1] == '/' || p[len(prefix)] == '/'
}

// plainPath reports whether p (a decoded URL path) reads the same to every
// server, so that an exemption by prefix cannot be stepped around: only
// [A-Za-z0-9._~-] in non-empty segments, no "." or ".." segment, and no
// percent-encoding in the request (rawPath empty). "/healthz/..;/admin"
// (a servlet container's "..") and "/healthz/..\admin" are not plain.
func plainPath(p, rawPath string) bool {
	if rawPath != "" || len(p) == 0 || p[0] != '/' {
		return false
	}
	if p == "/" {
		return true
	}
	segStart := 1
	for i := 1; i <= len(p); i++ {
		if i < len(p) {
			c := p[i]
			if c != '/' {
				if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '~' || c == '-') {
					return false
				}
				continue
			}
		}
		switch p[segStart:i] {
		case "", ".", "..":
			// An empty last segment is a trailing slash: plain.
			if i == len(p) && segStart == i {
				return true
			}
			return false
		}
		segStart = i + 1
	}
	return true
}

// methodMatches reports whether request r falls under a rule for method
// want (upper case). Methods are compared ignoring case, since Werkzeug
// (Flask), Rails and others upper-case the method before routing and
// net/http accepts "post"; a GET rule also takes HEAD, which most
// frameworks route to the GET handler; and a POST that asks to be taken
// for another method by a method-override header (ASP.NET Core's
// HttpMethodOverride, Symfony, Express's method-override honour
// X-HTTP-Method-Override and its variants on POST) falls under that
// method's rule too. An override in the body (Rails' and Laravel's
// _method form field) is not seen: a rule for PUT, PATCH or DELETE in
// front of such an upstream should not rely on the method alone.
func methodMatches(want string, r *http.Request) bool {
	got := r.Method
	if want == got || strings.EqualFold(want, got) || want == "GET" && strings.EqualFold(got, "HEAD") {
		return true
	}
	if !strings.EqualFold(got, "POST") {
		return false
	}
	for _, h := range methodOverrideHeaders {
		for _, v := range r.Header[h] {
			if strings.EqualFold(strings.TrimSpace(v), want) {
				return true
			}
		}
	}
	return false
}

// methodOverrideHeaders are the method-override headers frameworks honour
// on POST, canonical.
var methodOverrideHeaders = [...]string{"X-Http-Method-Override", "X-Http-Method", "X-Method-Override"}

// upperMethod returns m upper-cased, allocating only if it has a lower-case
// letter.
func upperMethod(m string) string {
	for i := 0; i < len(m); i++ {
		if 'a' <= m[i] && m[i] <= 'z' {
			return strings.ToUpper(m)
		}
	}
	return m
}

// validMethod reports whether m is an RFC 9110 method token.
func validMethod(m string) bool {
	if m == "" {
		return false
	}
	for i := 0; i < len(m); i++ {
		c := m[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return true
}
