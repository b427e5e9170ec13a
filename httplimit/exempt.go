package httplimit

import (
	"net/http"
	"net/netip"
	"strings"
)

// Exemptions lists requests the middleware passes on untouched: no rule is
// consulted, no quota consumed, no rate-limit header set; they are counted
// as Stats.Exempt. A request is exempt if any list matches.
//
// A CORS preflight (OPTIONS with Origin and Access-Control-Request-Method)
// never consumes a rule's quota: the browser sends it on its own before the
// real request, which is limited as usual. It is decided by
// Options.Preflight if set, else exempt.
//
// Exemptions match narrowly, the opposite of rules (which match every
// spelling an upstream may route to their prefix): a request is exempt
// only if every server would read it as what the exemption names.
type Exemptions struct {
	// Paths are whole-segment prefixes of the URL path, compared exactly
	// (case included): "/healthz" matches "/healthz" and "/healthz/live",
	// not "/healthzx" or "/HEALTHZ". Each must be a plain path (see
	// below). Only a plain request path is ever exempt: [A-Za-z0-9._~-]
	// in non-empty segments, no "." or ".." segment, no percent-encoding.
	// "/healthz/../admin", "/healthz/..;/admin" (a servlet container's
	// "..") and "/healthz/..%5cadmin" (a backslash) are not plain, since
	// some upstream routes each of them outside /healthz.
	Paths []string
	// CIDRs exempt clients whose address lies in any of them. The address
	// is found as IP says (socket peer, or through trusted proxies).
	CIDRs []netip.Prefix
	// IP finds the client address for CIDRs; its prefix lengths are
	// ignored (the whole address is matched). The zero value uses the
	// socket address.
	IP IPConfig
	// Methods are request methods ("HEAD"), compared exactly: "head" is
	// not exempt, since an upstream that reads methods case-sensitively
	// may route it elsewhere.
	Methods []string
}

type exemptions struct {
	any     bool // any list is set (else only CORS preflights are exempt)
	paths   []string
	cidrs   []netip.Prefix
	ip      *ipKeyer
	methods []string
}

func compileExemptions(e Exemptions) (exemptions, error) {
	var x exemptions
	for i, p := range e.Paths {
		if !strings.HasPrefix(p, "/") {
			return x, invalidf("Exempt.Paths[%d] %q must start with /", i, p)
		}
		if !plainPath(p, "") {
			return x, invalidf("Exempt.Paths[%d] %q must be a plain path ([A-Za-z0-9._~-] segments, no dot segments)", i, p)
		}
		if len(p) > 1 {
			p = strings.TrimSuffix(p, "/")
		}
		x.paths = append(x.paths, p)
	}
	for i, m := range e.Methods {
		if !validMethod(m) {
			return x, invalidf("Exempt.Methods[%d] %q is not a method", i, m)
		}
		x.methods = append(x.methods, m)
	}
	for i, p := range e.CIDRs {
		if !p.IsValid() {
			return x, invalidf("Exempt.CIDRs[%d] is not a valid prefix", i)
		}
		// Addresses are compared unmapped (see ClientIP).
		a, bits := p.Addr(), p.Bits()
		if a.Is4In6() {
			a, bits = a.Unmap(), max(bits-96, 0)
		}
		x.cidrs = append(x.cidrs, netip.PrefixFrom(a.WithZone(""), bits).Masked())
	}
	if len(x.cidrs) > 0 {
		k, err := newIPKeyer(e.IP)
		if err != nil {
			return x, err
		}
		x.ip = k
	}
	x.any = len(x.paths)+len(x.methods)+len(x.cidrs) > 0
	return x, nil
}

// match reports whether r is exempt by one of the lists (CORS preflights
// are the caller's business).
func (x *exemptions) match(r *http.Request) bool {
	for _, m := range x.methods {
		if r.Method == m {
			return true
		}
	}
	// Only a plain path can be exempt: "/healthz/../api" must not win an
	// exemption for an upstream that resolves it to /api, nor
	// "/api/../healthz" for one that routes the raw path by its "/api"
	// prefix.
	// A path-override header (X-Original-URL, X-Rewrite-URL) names the
	// path IIS or Symfony will route to, whatever the request line says:
	// "/healthz" with "X-Original-URL: /admin" reaches /admin there.
	if p := r.URL.Path; len(x.paths) > 0 && plainPath(p, r.URL.RawPath) && !hasPathOverride(r) {
		for _, prefix := range x.paths {
			if pathHasPrefix(p, prefix) {
				return true
			}
		}
	}
	if len(x.cidrs) > 0 {
		a, ok := x.ip.addr(r)
		if !ok {
			return false // no address: not exempt, the rules decide
		}
		for _, c := range x.cidrs {
			if c.Contains(a) {
				return true
			}
		}
	}
	return false
}

// isPreflight reports whether an OPTIONS request is a CORS preflight.
func isPreflight(r *http.Request) bool {
	return len(r.Header["Origin"]) > 0 && len(r.Header["Access-Control-Request-Method"]) > 0
}
