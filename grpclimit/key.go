package grpclimit

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"

	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
)

// KeyFunc names the client a call is counted against. fullMethod is the
// call's "/package.Service/Method". An error makes the call fail open or
// closed (Options.FailOpen); it never reaches the backend.
type KeyFunc func(ctx context.Context, fullMethod string) (string, error)

// MaxKeyLen is the longest key a built-in key function returns; longer keys
// are refused with ErrKeyTooLong rather than stored, so a client cannot make
// the limiter hold arbitrarily large keys (httplimit's bound too).
const MaxKeyLen = 256

var (
	// ErrNoKey is wrapped by key function errors for a call that carries
	// no key (no peer, a missing metadata entry).
	ErrNoKey = errors.New("grpclimit: call has no rate-limit key")
	// ErrKeyTooLong is wrapped when the key would exceed MaxKeyLen.
	ErrKeyTooLong = errors.New("grpclimit: rate-limit key too long")
	// ErrBadPeer is wrapped when the call's peer address is not an IP
	// address (a Unix socket, an in-process transport).
	ErrBadPeer = errors.New("grpclimit: peer address is not an IP address")
	// ErrInvalidOptions is wrapped by every error New returns.
	ErrInvalidOptions = errors.New("grpclimit: invalid options")
)

// IPConfig configures PeerIP.
type IPConfig struct {
	// IPv4Prefix is the prefix length IPv4 peers are grouped by, 1..32;
	// 0 means 32 (one key per address).
	IPv4Prefix int
	// IPv6Prefix is the prefix length IPv6 peers are grouped by, 1..128;
	// 0 means 64, the usual allocation to one host or LAN, so that one
	// host cannot dodge its limit by rotating through its own prefix.
	IPv6Prefix int
}

// PeerIP returns a KeyFunc that keys a call by its transport peer's IP
// address (peer.FromContext), masked to IPConfig's prefix lengths: IPv4 by
// /32 and IPv6 by /64 unless configured otherwise, as package httplimit
// keys HTTP clients. IPv4-mapped IPv6 addresses count as IPv4. The socket
// peer is the client: no forwarding metadata is believed, so a client
// cannot choose its key (behind a proxy, key by a metadata entry the proxy
// sets and strips from clients instead). A peer that is not an IP address
// is an error wrapping ErrBadPeer; a context without a peer (a client-side
// call) one wrapping ErrNoKey.
func PeerIP(cfg IPConfig) (KeyFunc, error) {
	k, err := newPeerKeyer(cfg)
	if err != nil {
		return nil, err
	}
	return k.key, nil
}

// peerKeyer is PeerIP's key function. The Limiter's default key calls
// appendKey directly, so that the rule's namespaced key is built in one
// allocation rather than the address's string and then the concatenation.
type peerKeyer struct {
	v4, v6    int
	errNoPeer error
}

func newPeerKeyer(cfg IPConfig) (*peerKeyer, error) {
	v4, v6 := cfg.IPv4Prefix, cfg.IPv6Prefix
	if v4 == 0 {
		v4 = 32
	}
	if v6 == 0 {
		v6 = 64
	}
	if v4 < 1 || v4 > 32 {
		return nil, fmt.Errorf("grpclimit: IPConfig.IPv4Prefix must be in [1, 32], got %d: %w", cfg.IPv4Prefix, ErrInvalidOptions)
	}
	if v6 < 1 || v6 > 128 {
		return nil, fmt.Errorf("grpclimit: IPConfig.IPv6Prefix must be in [1, 128], got %d: %w", cfg.IPv6Prefix, ErrInvalidOptions)
	}
	return &peerKeyer{v4: v4, v6: v6, errNoPeer: fmt.Errorf("no peer in the call's context: %w", ErrNoKey)}, nil
}

func (k *peerKeyer) key(ctx context.Context, _ string) (string, error) {
	var buf [48]byte // the longest masked address, IPv6, is 39 bytes
	b, err := k.appendKey(buf[:0], ctx)
	if err != nil {
		return "", err
	}
	return string(b), nil
}

// appendKey appends the peer's masked address to dst: "192.0.2.1",
// "2001:db8:1:2::" for any address of 2001:db8:1:2::/64.
func (k *peerKeyer) appendKey(dst []byte, ctx context.Context) ([]byte, error) {
	p, ok := peer.FromContext(ctx)
	if !ok || p.Addr == nil {
		return dst, k.errNoPeer
	}
	a, ok := peerAddr(p.Addr)
	if !ok {
		return dst, fmt.Errorf("peer %q: %w", p.Addr.String(), ErrBadPeer)
	}
	bits := k.v6
	if a.Is4() {
		bits = k.v4
	}
	pfx, _ := a.Prefix(bits) // cannot fail: bits is in range for a's family and a has no zone
	return pfx.Addr().AppendTo(dst), nil
}

// peerAddr returns the unmapped, zone-less IP of a transport address.
// grpc-go's TCP peers are *net.TCPAddr: read without formatting a string.
func peerAddr(addr net.Addr) (netip.Addr, bool) {
	var a netip.Addr
	if t, ok := addr.(*net.TCPAddr); ok {
		if t == nil {
			return netip.Addr{}, false // a typed nil from a custom transport
		}
		ip, ok := netip.AddrFromSlice(t.IP)
		if !ok {
			return netip.Addr{}, false
		}
		a = ip
	} else {
		ap, err := netip.ParseAddrPort(addr.String())
		if err != nil {
			return netip.Addr{}, false
		}
		a = ap.Addr()
	}
	return a.Unmap().WithZone(""), true
}

// Metadata returns a KeyFunc that keys a call by the first value of the
// named incoming metadata entry (server side), typically an API key
// ("x-api-key"). Names are matched ignoring case, as gRPC metadata keys
// are. A missing or empty entry is an error wrapping ErrNoKey; a value
// longer than MaxKeyLen one wrapping ErrKeyTooLong. The value is used as
// is: it trusts the client entirely, so use it behind key verification,
// or with Options.FailOpen and a FallbackKey so a missing key is limited
// per peer.
func Metadata(name string) KeyFunc {
	name = strings.ToLower(name)
	// Built once: a flood of keyless calls must not allocate errors.
	errMissing := fmt.Errorf("metadata %s missing: %w", name, ErrNoKey)
	errLong := fmt.Errorf("metadata %s longer than %d bytes: %w", name, MaxKeyLen, ErrKeyTooLong)
	return func(ctx context.Context, _ string) (string, error) {
		v := metadata.ValueFromIncomingContext(ctx, name)
		if len(v) == 0 || v[0] == "" {
			return "", errMissing
		}
		if len(v[0]) > MaxKeyLen {
			return "", errLong
		}
		return v[0], nil
	}
}

// Method is a KeyFunc that keys a call by its full method name, so each
// method has one budget shared by every caller (a client limiting its own
// calls per method, or a server protecting an expensive method globally).
func Method(_ context.Context, fullMethod string) (string, error) {
	return fullMethod, nil
}

// Constant returns a KeyFunc that keys every call by s: one budget for
// everything the rule matches (a client limiting itself as a whole).
func Constant(s string) KeyFunc {
	return func(context.Context, string) (string, error) { return s, nil }
}

// PerMethod returns a KeyFunc that keys a call by its full method and the
// key k returns, so every method under a rule gets its own budget per
// client.
func PerMethod(k KeyFunc) KeyFunc {
	errLong := fmt.Errorf("method key longer than %d bytes: %w", MaxKeyLen, ErrKeyTooLong)
	return func(ctx context.Context, fullMethod string) (string, error) {
		key, err := k(ctx, fullMethod)
		if err != nil {
			return "", err
		}
		if len(fullMethod)+1+len(key) > MaxKeyLen {
			return "", errLong
		}
		return fullMethod + " " + key, nil
	}
}
