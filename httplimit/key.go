package httplimit

import (
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"net/textproto"
	"strings"
)

// KeyFunc names the client a request is counted against. An error makes the
// request fail open or closed (Options.FailOpen); it never reaches the
// backend.
type KeyFunc func(r *http.Request) (string, error)

// MaxKeyLen is the longest key a built-in key function returns; longer keys
// are refused with ErrKeyTooLong rather than stored, so a client cannot make
// the limiter hold arbitrarily large keys.
const MaxKeyLen = 256

var (
	// ErrNoKey is wrapped by key function errors for a request that carries
	// no key (for example a missing API key header).
	ErrNoKey = errors.New("httplimit: request has no rate-limit key")
	// ErrKeyTooLong is wrapped when the key would exceed MaxKeyLen.
	ErrKeyTooLong = errors.New("httplimit: rate-limit key too long")
	// ErrBadRemoteAddr is wrapped when http.Request.RemoteAddr is not an
	// IP:port (for example a Unix socket listener).
	ErrBadRemoteAddr = errors.New("httplimit: RemoteAddr is not an IP address")
)

// Forwarding header names accepted by IPConfig.Header.
const (
	HeaderXForwardedFor = "X-Forwarded-For"
	HeaderForwarded     = "Forwarded"
	HeaderXRealIP       = "X-Real-Ip"
)

// IPConfig configures ClientIP.
type IPConfig struct {
	// TrustedProxies are the peers whose forwarding header is believed.
	// Empty (the default) means the socket address is the client, whatever
	// the request's headers say.
	TrustedProxies []netip.Prefix
	// Header is the forwarding header the trusted proxies append to:
	// HeaderXForwardedFor (the default), HeaderForwarded (RFC 7239) or
	// HeaderXRealIP. Only one is read: if a proxy set one header and passed
	// another through from the client untouched, reading the untouched one
	// would let the client pick its key.
	Header string
	// IPv4Prefix is the prefix length IPv4 clients are grouped by, 1..32;
	// 0 means 32 (one key per address).
	IPv4Prefix int
	// IPv6Prefix is the prefix length IPv6 clients are grouped by, 1..128;
	// 0 means 64, the usual allocation to one host or LAN.
	IPv6Prefix int
}

type ipKeyer struct {
	trusted []netip.Prefix
	header  string // canonical key
	kind    int    // hdrKindXFF, hdrKindForwarded, hdrKindRealIP
	v4, v6  int
}

const (
	hdrKindXFF = iota
	hdrKindForwarded
	hdrKindRealIP
)

// ClientIP returns a KeyFunc that keys a request by its client's IP address,
// masked to IPConfig's prefix lengths. The address comes from the socket
// (http.Request.RemoteAddr); if the socket peer is a trusted proxy, the
// configured forwarding header is walked from its rightmost entry leftwards,
// skipping trusted hops, and the first untrusted address is the client. If
// every hop is trusted, the leftmost is the client. An entry that is not an
// IP address ("unknown", an obfuscated RFC 7239 identifier, garbage) ends
// the walk at the trusted hop that wrote it, whose address becomes the key:
// such clients share that proxy's budget rather than choosing their own.
func ClientIP(cfg IPConfig) (KeyFunc, error) {
	k, err := newIPKeyer(cfg)
	if err != nil {
		return nil, err
	}
	return k.key, nil
}

func newIPKeyer(cfg IPConfig) (*ipKeyer, error) {
	k := &ipKeyer{v4: cfg.IPv4Prefix, v6: cfg.IPv6Prefix}
	if k.v4 == 0 {
		k.v4 = 32
	}
	if k.v6 == 0 {
		k.v6 = 64
	}
	if k.v4 < 1 || k.v4 > 32 {
		return nil, fmt.Errorf("httplimit: IPConfig.IPv4Prefix must be in [1, 32], got %d: %w", cfg.IPv4Prefix, ErrInvalidOptions)
	}
	if k.v6 < 1 || k.v6 > 128 {
		return nil, fmt.Errorf("httplimit: IPConfig.IPv6Prefix must be in [1, 128], got %d: %w", cfg.IPv6Prefix, ErrInvalidOptions)
	}
	for i, p := range cfg.TrustedProxies {
		if !p.IsValid() {
			return nil, fmt.Errorf("httplimit: IPConfig.TrustedProxies[%d] is not a valid prefix: %w", i, ErrInvalidOptions)
		}
		// Compare unmapped addresses throughout, so ::ffff:10.0.0.1 and
		// 10.0.0.1 are the same peer.
		a := p.Addr()
		bits := p.Bits()
		if a.Is4In6() {
			a = a.Unmap()
			bits = max(bits-96, 0)
		}
		k.trusted = append(k.trusted, netip.PrefixFrom(a.WithZone(""), bits).Masked())
	}
	k.header = textproto.CanonicalMIMEHeaderKey(cfg.Header)
	switch k.header {
	case "", HeaderXForwardedFor:
		k.header, k.kind = HeaderXForwardedFor, hdrKindXFF
	case HeaderForwarded:
		k.kind = hdrKindForwarded
	case HeaderXRealIP:
		k.kind = hdrKindRealIP
	default:
		return nil, fmt.Errorf("httplimit: IPConfig.Header %q is not one of X-Forwarded-For, Forwarded, X-Real-IP: %w", cfg.Header, ErrInvalidOptions)
	}
	return k, nil
}

// addr returns the client's unmasked address, found as key finds it.
func (k *ipKeyer) addr(r *http.Request) (netip.Addr, bool) {
	peer, raw, ok := parseHostPort(r.RemoteAddr)
	if !ok {
		return netip.Addr{}, false
	}
	if len(k.trusted) == 0 || !k.isTrusted(peer) {
		return peer, true
	}
	a, _ := k.walk(r, peer, raw)
	return a, true
}

func (k *ipKeyer) isTrusted(a netip.Addr) bool {
	for _, p := range k.trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

func (k *ipKeyer) key(r *http.Request) (string, error) {
	peer, raw, ok := parseHostPort(r.RemoteAddr)
	if !ok {
		return "", ErrBadRemoteAddr
	}
	if len(k.trusted) == 0 || !k.isTrusted(peer) {
		return k.format(peer, raw), nil
	}
	a, raw := k.walk(r, peer, raw)
	return k.format(a, raw), nil
}

// walk returns the client behind the trusted peer and, where it is at hand,
// the canonical text of its address (else "").
func (k *ipKeyer) walk(r *http.Request, peer netip.Addr, peerRaw string) (netip.Addr, string) {
	lines := r.Header[k.header]
	cur, curRaw := peer, peerRaw
	if k.kind == hdrKindRealIP {
		if len(lines) == 0 {
			return cur, curRaw
		}
		if a, raw, ok := parseNode(strings.TrimSpace(lines[len(lines)-1])); ok {
			return a, raw
		}
		return cur, curRaw
	}
	// Walk entries right to left across all header lines without
	// allocating: the last line holds the most recent hops.
	for i := len(lines) - 1; i >= 0; i-- {
		line := lines[i]
		for end := len(line); end >= 0; {
			start := strings.LastIndexByte(line[:end], ',') + 1
			entry := strings.TrimSpace(line[start:end])
			end = start - 1
			if entry == "" {
				continue // tolerate "a, , b" and trailing commas
			}
			if k.kind == hdrKindForwarded {
				entry = forwardedFor(entry)
			}
			a, raw, ok := parseNode(entry)
			if !ok {
				return cur, curRaw
			}
			cur, curRaw = a, raw
			if !k.isTrusted(a) {
				return cur, curRaw
			}
		}
	}
	return cur, curRaw
}

// format masks a to the configured prefix and renders it. raw, when not
// empty, is a's canonical text; an IPv4 /32 key then reuses it instead of
// allocating a new string.
func (k *ipKeyer) format(a netip.Addr, raw string) string {
	if a.Is4() {
		if k.v4 == 32 {
			if raw != "" {
				return raw
			}
			return a.String()
		}
		p, _ := a.Prefix(k.v4) // cannot fail: 1 <= v4 <= 32 and a is IPv4
		return p.Addr().String()
	}
	if k.v6 == 128 {
		return a.String()
	}
	p, _ := a.Prefix(k.v6) // cannot fail: 1 <= v6 <= 128 and a is IPv6 without zone
	return p.Addr().String()
}

// parseHostPort parses "ip:port" or "[ip]:port" (RemoteAddr's form) and
// returns the unmapped, zone-less address. raw is the address text when it
// is already canonical IPv4 (netip accepts only canonical dotted decimal),
// else "".
func parseHostPort(s string) (netip.Addr, string, bool) {
	ap, err := netip.ParseAddrPort(s)
	if err != nil {
		return netip.Addr{}, "", false
	}
	a := ap.Addr()
	if a.Is4() {
		raw := s[:strings.LastIndexByte(s, ':')]
		if strings.HasPrefix(raw, "[") {
			raw = "" // bracketed IPv4: not the canonical text
		}
		return a, raw, true
	}
	return a.Unmap().WithZone(""), "", true
}

// parseNode parses one forwarding hop: an IP, "ip:port", "[ipv6]" or
// "[ipv6]:port" (RFC 7239 node syntax, also seen in X-Forwarded-For).
func parseNode(s string) (netip.Addr, string, bool) {
	if a, err := netip.ParseAddr(s); err == nil {
		if a.Is4() {
			return a, s, true
		}
		return a.Unmap().WithZone(""), "", true
	}
	if strings.HasPrefix(s, "[") {
		if end := strings.IndexByte(s, ']'); end > 0 && (end == len(s)-1 || s[end+1] == ':') {
			if a, err := netip.ParseAddr(s[1:end]); err == nil {
				return a.Unmap().WithZone(""), "", true
			}
		}
		return netip.Addr{}, "", false
	}
	if ap, err := netip.ParseAddrPort(s); err == nil && ap.Addr().Is4() {
		return ap.Addr(), s[:strings.LastIndexByte(s, ':')], true
	}
	return netip.Addr{}, "", false
}

// forwardedFor returns the unquoted value of the "for" parameter of one
// RFC 7239 forwarded-element ("for=192.0.2.60;proto=http;by=203.0.113.43"),
// or "" if it has none.
func forwardedFor(elem string) string {
	for elem != "" {
		var pair string
		pair, elem, _ = strings.Cut(elem, ";")
		name, value, ok := strings.Cut(strings.TrimSpace(pair), "=")
		if !ok || !strings.EqualFold(strings.TrimSpace(name), "for") {
			continue
		}
		value = strings.TrimSpace(value)
		if len(value) >= 2 && value[0] == '"' && value[len(value)-1] == '"' {
			value = value[1 : len(value)-1]
		}
		return value
	}
	return ""
}

// Header returns a KeyFunc that keys a request by the value of the named
// header, typically an API key. A missing or empty header is an error
// wrapping ErrNoKey; a value longer than MaxKeyLen one wrapping
// ErrKeyTooLong. The value is used as is: keys are compared byte for byte.
func Header(name string) KeyFunc {
	ck := textproto.CanonicalMIMEHeaderKey(name)
	// Built once: a flood of keyless requests must not allocate errors.
	errMissing := fmt.Errorf("header %s missing: %w", ck, ErrNoKey)
	errLong := fmt.Errorf("header %s longer than %d bytes: %w", ck, MaxKeyLen, ErrKeyTooLong)
	return func(r *http.Request) (string, error) {
		v := r.Header[ck]
		if len(v) == 0 || v[0] == "" {
			return "", errMissing
		}
		if len(v[0]) > MaxKeyLen {
			return "", errLong
		}
		return v[0], nil
	}
}

// RouteIP returns a KeyFunc that keys a request by its method, its URL path
// and the key ip returns, so every path under a rule gets its own budget
// per client. Method and path are taken in the spelling-insensitive form
// rules match them in (see Rule.PathPrefix): "post /LOGIN;x=1" and
// "POST /login.json" share the budget of "POST /login", so respelling a
// route buys no fresh allowance. The number of keys grows with the number
// of distinct paths clients send; the engine's key bound caps the memory
// that costs.
//
// A request carrying a path-override header (X-Original-URL,
// X-Rewrite-URL) is keyed by its method and client alone, on one budget
// shared by every such request of the client: which of its two paths the
// upstream routes by is unknown here, and keying by either would let a
// client vary the other for a fresh budget. A gateway in front of
// upstreams that do not need these headers should strip them from
// untrusted clients (cmd/gateway does).
func RouteIP(ip KeyFunc) KeyFunc {
	errLong := fmt.Errorf("route key longer than %d bytes: %w", MaxKeyLen, ErrKeyTooLong)
	return func(r *http.Request) (string, error) {
		k, err := ip(r)
		if err != nil {
			return "", err
		}
		// overrideRoute starts with no "/", so it is no routePath.
		p := overrideRoute
		if !hasPathOverride(r) {
			p, _ = withoutFormat(routePath(r.URL.Path))
		}
		m := upperMethod(r.Method)
		if len(m)+len(p)+len(k)+2 > MaxKeyLen {
			return "", errLong
		}
		return m + " " + p + " " + k, nil
	}
}

// overrideRoute is RouteIP's path for requests with a path-override header.
const overrideRoute = "(path-override)"
