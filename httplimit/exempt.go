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
// is always exempt, whatever Exemptions says: the browser sends it on its
// own before the real request, which is limited as usual.
type Exemptions struct {
	// Paths are whole-segment prefixes of the URL path, as
	// Rule.PathPrefix ("/healthz" matches "/healthz" and "/healthz/live",
	// not "/healthzx"). Each must start with "/". A request path that is
	// not clean (dot segments, doubled slashes) is never exempt, since an
	// upstream may route it differently than its cleaned form.
	Paths []string
	// CIDRs exempt clients whose address lies in any of them. The address
	// is found as IP says (socket peer, or through trusted proxies).
	CIDRs []netip.Prefix
	// IP finds the client address for CIDRs; its prefix lengths are
	// ignored (the whole address is matched). The zero value uses the
	// socket address.
	IP IPConfig
	// Methods are exact request methods ("OPTIONS", "HEAD").
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
		x.paths = append(x.paths, cleanPath(p))
	}
	for i, m := range e.Methods {
		if m == "" || strings.ContainsAny(m, " \t\r\n") {
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

// match reports whether r is exempt.
func (x *exemptions) match(r *http.Request) bool {
	if r.Method == http.MethodOptions && isPreflight(r) {
		return true
	}
	for _, m := range x.methods {
		if r.Method == m {
			return true
		}
	}
	// Only a clean path can be exempt: "/healthz/../api" cleans to a
	// limited path, but "/api/../healthz" must not win an exemption for
	// an upstream that routes the raw path by its "/api" prefix.
	if p := r.URL.Path; len(x.paths) > 0 && p == cleanPath(p) {
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
