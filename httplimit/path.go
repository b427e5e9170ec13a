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
//   - percent-encoding left after the server's one decoding: a proxy or
//     framework that decodes again routes "/%256cogin" ("/%6cogin" once
//     decoded) to "/login", so escapes are decoded repeatedly until none
//     is left;
//   - trailing dots and whitespace of a segment: IIS (Windows file names)
//     and older Spring strip them ("/login.", "/login%20", "/login%09",
//     "/login..", "/login%20.json" are "/login"); a segment that is "."
//     or ".." once its trailing whitespace is gone stays a dot segment;
//   - NUL, "?" and "#" once decoded: C-string handling anywhere behind
//     the gateway ends the path at the first NUL ("/login%00.php" is
//     "/login"), and a component that decodes again reads "%3f" and
//     "%23" as the start of the query or fragment ("/login%3fx" is
//     "/login?x"), so the path is cut at the first of them;
//   - Unicode spellings: whitespace (unicode.IsSpace: "/login%c2%a0"
//     ends in a no-break space) counts as a space, so a segment loses it
//     at its end like ASCII whitespace; format characters (unicode.Cf:
//     zero-width space, byte-order mark, soft hyphen) are dropped
//     wherever they are; fullwidth forms of ASCII (U+FF01 to U+FF5E,
//     "/ｌｏｇｉｎ") are read as the ASCII they stand for, as servers with
//     Windows best-fit mappings read them; overlong two-byte UTF-8
//     ("%c0%af" for "/", "%c0%ae" for ".") is read as the ASCII it
//     encodes, as old decoders did; any other invalid byte becomes
//     U+FFFD;
//   - dot segments and doubled slashes (path.Clean);
//   - a format suffix on the last segment: Rails routes "/login.json" to
//     the /login action, and Spring's suffix patterns route "/login.x.y"
//     to "/login.*" (matchPath tries the path as it is and cut at each
//     dot of its last segment);
//   - a path override: IIS's URL Rewrite, Symfony and Laminas route by
//     X-Original-URL or X-Rewrite-URL instead of the request line, so the
//     path in those headers is matched too (see pathOverrideHeaders).
//
// Exemptions go the other way (see plainPath): only a path that every
// server reads the same is ever exempt.

// routePath returns p in the canonical form rule prefixes are compared in:
// escapes decoded until none is left, cut at a NUL, "?" or "#", letters
// and Unicode spellings folded (see above), backslashes as slashes,
// ";params" dropped from each segment and trailing dots and whitespace
// from each segment that is no dot segment, cleaned. It allocates only
// when p is not already canonical (see isRoutePath: in practice an ASCII
// path in lower case, clean, without ";", "\\", "%", "?", "#", spaces,
// control characters or a segment ending in ".").
//
// A fold can make a new spelling to fold (a dropped zero-width character
// between "%" and "41" leaves an escape), so folding repeats until
// nothing changes; each round but the first shortens the path or leaves
// it as it is, and four rounds are far more than any input needs (the
// last round's result is returned if one ever does not settle).
func routePath(p string) string {
	if p == "" {
		return "/"
	}
	for range 4 {
		if isRoutePath(p) {
			return p
		}
		q := foldPath(p)
		if q == p {
			return q
		}
		p = q
	}
	return p
}

// foldPath is one round of routePath's folding.
func foldPath(p string) string {
	if strings.IndexByte(p, '%') >= 0 {
		p = unescapeAll(p)
	}
	b := make([]byte, 0, len(p)+1)
	inParams := false
	segStart := 0 // index in b of the current segment's first byte
scan:
	for i := 0; i < len(p); {
		c, size := p[i], 1
		if c >= utf8.RuneSelf {
			r, n := utf8.DecodeRuneInString(p[i:])
			size = n
			switch {
			case r == utf8.RuneError && n == 1:
				if a, ok := overlongASCII(p[i:]); ok {
					c, size = a, 2 // read as the ASCII it encodes, below
					break
				}
				if !inParams {
					b = utf8.AppendRune(b, utf8.RuneError)
				}
				i++
				continue
			case unicode.Is(unicode.Cf, r):
				i += n // zero-width and other format characters: dropped
				continue
			case 0xFF01 <= r && r <= 0xFF5E && r != 0xFF05:
				// Fullwidth ASCII, read as ASCII below; not "％", which
				// would make an escape after the decoding above.
				c = byte(r - 0xFEE0)
			case unicode.IsSpace(r):
				c = ' '
			default:
				if !inParams {
					b = utf8.AppendRune(b, unicode.ToLower(unicode.ToUpper(r)))
				}
				i += n
				continue
			}
		}
		switch {
		case c == 0 || c == '?' || c == '#':
			break scan
		case c == '/' || c == '\\':
			b = trimSegment(b, segStart)
			b = append(b, '/')
			segStart = len(b)
			inParams = false
		case inParams:
		case c == ';':
			inParams = true
		case 'A' <= c && c <= 'Z':
			b = append(b, c+('a'-'A'))
		default:
			b = append(b, c)
		}
		i += size
	}
	b = trimSegment(b, segStart)
	s := string(b)
	if s == "" || s[0] != '/' {
		s = "/" + s
	}
	return path.Clean(s)
}

// overlongASCII decodes an overlong two-byte UTF-8 form of an ASCII
// character at the start of s (0xC0 or 0xC1, then a continuation byte:
// "\xc0\xaf" is "/"), which old decoders (IIS's, notably) accepted. "%"
// is not decoded: it would make an escape after routePath's decoding.
func overlongASCII(s string) (byte, bool) {
	if len(s) < 2 || s[0]&^1 != 0xC0 || s[1]&0xC0 != 0x80 {
		return 0, false
	}
	c := s[0]&1<<6 | s[1]&0x3F
	return c, c != '%'
}

// trimSegment strips the trailing whitespace of the segment b[start:],
// then, unless what is left is "." or "..", its trailing dots and
// whitespace, the way IIS and older Spring read a segment: ".. " is "..",
// "login. ." is "login".
func trimSegment(b []byte, start int) []byte {
	end := len(b)
	for end > start && isPathSpace(b[end-1]) {
		end--
	}
	if seg := b[start:end]; string(seg) == "." || string(seg) == ".." {
		return b[:end]
	}
	for end > start && (b[end-1] == '.' || isPathSpace(b[end-1])) {
		end--
	}
	return b[:end]
}

// isPathSpace reports whether c is whitespace a server strips from the end
// of a segment: space, tab, LF, VT, FF, CR.
func isPathSpace(c byte) bool { return c == ' ' || '\t' <= c && c <= '\r' }

// unescapeAll decodes the %XX escapes of p until none is left; a "%" not
// followed by two hex digits is kept. Each round shortens p, so it ends.
func unescapeAll(p string) string {
	for {
		q, changed := unescapeOnce(p)
		if !changed {
			return p
		}
		p = q
	}
}

func unescapeOnce(p string) (string, bool) {
	i := strings.IndexByte(p, '%')
	for i >= 0 && !(i+2 < len(p) && isHex(p[i+1]) && isHex(p[i+2])) {
		j := strings.IndexByte(p[i+1:], '%')
		if j < 0 {
			return p, false
		}
		i += 1 + j
	}
	if i < 0 {
		return p, false
	}
	b := make([]byte, 0, len(p))
	b = append(b, p[:i]...)
	for ; i < len(p); i++ {
		if p[i] == '%' && i+2 < len(p) && isHex(p[i+1]) && isHex(p[i+2]) {
			b = append(b, unhex(p[i+1])<<4|unhex(p[i+2]))
			i += 2
			continue
		}
		b = append(b, p[i])
	}
	return string(b), true
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case c <= '9':
		return c - '0'
	case c >= 'a':
		return c - 'a' + 10
	}
	return c - 'A' + 10
}

// isRoutePath reports whether routePath(p) == p without building it: p
// starts with "/", has only printable ASCII other than upper-case letters,
// "\\", ";", "%", "?" and "#" (so no space or control character either), no empty
// segment, dot segment, segment ending in "." or trailing slash (except
// "/" itself). It may say false for a canonical path (non-ASCII, or with
// a space inside a segment or a lone "%"); routePath then rebuilds it,
// equal.
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
			if c <= ' ' || c >= 0x7f || c == '\\' || c == ';' || c == '%' || c == '?' || c == '#' || 'A' <= c && c <= 'Z' {
				return false
			}
			if c != '/' {
				continue
			}
		}
		if i == segStart || p[i-1] == '.' { // empty, ".", ".." or "x."
			return false
		}
		segStart = i + 1
	}
	return true
}

// withoutFormat returns p (canonical) without the format suffix of its
// last segment, from the segment's first dot on ("/login.json" and
// "/login.x.y" -> "/login"), and whether it had one: the stem a request
// is counted under by RouteIP, so that no suffix buys a new key. A
// segment's leading dots are its name, not a suffix ("/.well-known"),
// and the result is always canonical.
func withoutFormat(p string) (string, bool) {
	slash := strings.LastIndexByte(p, '/')
	i := slash + 1
	for i < len(p) && p[i] == '.' {
		i++
	}
	dot := strings.IndexByte(p[i:], '.')
	if dot < 0 {
		return p, false
	}
	return formatStem(p, slash+1, i+dot)
}

// formatStem returns p cut at the dot p[dot] of its last segment (which
// starts at seg), without the trailing dots and whitespace the stem is
// left with ("/login%20.json" -> "/login"), and false where no stem
// remains or it would be a dot segment ("/..json" is no route's format
// variant).
func formatStem(p string, seg, dot int) (string, bool) {
	end := dot
	for end > seg && (p[end-1] == '.' || isPathSpace(p[end-1])) {
		end--
	}
	if end == seg {
		return p, false // "/ .json": no stem left
	}
	if stem := p[seg:end]; stem == "." || stem == ".." {
		return p, false
	}
	return p[:end], true
}

// matchPath reports whether the canonical path p falls under the
// canonical rule prefix as it is, or cut at any dot of its last segment
// after the segment's leading dots: Spring's suffix patterns route
// "/login.x.y" to "/login.*", and a rule for "/login.json" must still
// take "/login.json.x". Paths with no dot in their last segment (most)
// cost one comparison.
func matchPath(p, prefix string) bool {
	if pathHasPrefix(p, prefix) {
		return true
	}
	seg := strings.LastIndexByte(p, '/') + 1
	i := seg
	for i < len(p) && p[i] == '.' {
		i++
	}
	for {
		dot := strings.IndexByte(p[i:], '.')
		if dot < 0 {
			return false
		}
		i += dot
		if q, ok := formatStem(p, seg, i); ok && pathHasPrefix(q, prefix) {
			return true
		}
		i++
	}
}

// pathOverrideHeaders are the headers some servers route by instead of
// the request line's path (IIS URL Rewrite and ASP.NET set and read
// X-Original-URL; Symfony and Laminas/Zend honour X-Original-URL and
// X-Rewrite-URL from the client unless configured otherwise), canonical.
var pathOverrideHeaders = [...]string{"X-Original-Url", "X-Rewrite-Url"}

// overrideMatches reports whether the path in one of r's path-override
// headers falls under the canonical prefix. Without such a header it
// costs two map lookups and allocates nothing.
func overrideMatches(r *http.Request, prefix string) bool {
	for _, h := range pathOverrideHeaders {
		for _, v := range r.Header[h] {
			if matchPath(routePath(overridePath(v)), prefix) {
				return true
			}
		}
	}
	return false
}

// hasPathOverride reports whether r carries a path-override header.
func hasPathOverride(r *http.Request) bool {
	for _, h := range pathOverrideHeaders {
		if len(r.Header[h]) > 0 {
			return true
		}
	}
	return false
}

// overridePath returns the path of a path-override header's value: a
// request target ("/login?next=/"), possibly absolute-form
// ("http://host/login"). The path is left escaped; routePath decodes it.
func overridePath(v string) string {
	v = strings.TrimSpace(v)
	if i := strings.IndexAny(v, "?#"); i >= 0 {
		v = v[:i]
	}
	if i := strings.Index(v, "://"); i > 0 && !strings.HasPrefix(v, "/") {
		rest := v[i+3:]
		j := strings.IndexByte(rest, '/')
		if j < 0 {
			return "/"
		}
		return rest[j:]
	}
	return v
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
// [A-Za-z0-9._~-] in non-empty segments, no "." or ".." segment, no
// segment ending in "." (IIS strips it: "/healthz/..." may be read as
// "/healthz/"), and no percent-encoding in the request (rawPath empty).
// "/healthz/..;/admin" (a servlet container's "..") and
// "/healthz/..\admin" are not plain.
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
		if i == segStart {
			// An empty last segment is a trailing slash: plain.
			return i == len(p)
		}
		if p[i-1] == '.' { // ".", ".." or "x."
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
