package httplimit

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/slidelimit/slidelimit/engine"
)

// NewKeyChain returns a KeyFunc that asks sources in order and keys the
// request by the first that succeeds: NewKeyChain(Header("X-Api-Key"), ip)
// limits a request per API key when it has one and per client IP when it
// has none or an over-long one, so leaving the key out never escapes the
// limit. If every source fails, the last error is returned.
//
// A key from the first source is returned as is; a key from source i > 0 is
// prefixed with "\x00", i and "\x00" (allocating, on that path only), so a
// client cannot send an API key spelled like a victim's IP address and
// spend the victim's fallback budget. The NUL byte cannot occur in a header
// value (net/http refuses such requests), so the namespaces never meet.
func NewKeyChain(sources ...KeyFunc) (KeyFunc, error) {
	if len(sources) == 0 {
		return nil, invalidf("NewKeyChain needs at least one source")
	}
	for i, s := range sources {
		if s == nil {
			return nil, invalidf("NewKeyChain source %d is nil", i)
		}
	}
	srcs := append([]KeyFunc(nil), sources...)
	prefixes := make([]string, len(srcs))
	for i := 1; i < len(srcs); i++ {
		prefixes[i] = "\x00" + strconv.Itoa(i) + "\x00"
	}
	return func(r *http.Request) (string, error) {
		var err error
		for i, s := range srcs {
			var k string
			k, err = s(r)
			if err == nil {
				if i == 0 {
					return k, nil
				}
				return prefixes[i] + k, nil
			}
		}
		return "", err
	}, nil
}

// fallbackNS namespaces keys produced by a fallback (Options.FallbackKey,
// KeyBudget's IP), for the reason NewKeyChain gives.
const fallbackNS = "\x00ip\x00"

// KeyBudgetConfig configures NewKeyBudget.
type KeyBudgetConfig struct {
	// Key is the client-chosen key, typically Header("X-Api-Key").
	// Required.
	Key KeyFunc
	// IP names the client the budget is charged to. Nil means
	// ClientIP(IPConfig{}): the socket address, no proxies trusted.
	IP KeyFunc
	// NewKeys is how many keys not seen in the last Window one IP may
	// introduce per Window before its requests are keyed by the IP. >= 1.
	NewKeys int
	// Window is both the budget's window and how long a key stays "seen".
	// > 0 and <= engine.MaxWindow.
	Window time.Duration
	// Verified, if set, reports keys known to be genuine (for example
	// found in a key store); they are never charged. It is called for
	// every request with a key, so it must be fast and safe for
	// concurrent use.
	Verified func(key string) bool
	// MaxMemory bounds each of the two trackers' key state in bytes; 0
	// means 16 MiB each.
	MaxMemory int64
	// Clock is for tests; nil means the engine's clock.
	Clock engine.Clock
}

// KeyBudget is a KeyFunc (its Key method) that lets clients choose their
// key (an API key nobody verifies at the edge) without letting one client
// mint itself a fresh allowance per request: each client IP may introduce
// at most NewKeys keys not seen in the last Window; past that, its requests
// with new keys are keyed by its IP instead, so they share one allowance.
//
// Guarantees: a request without a usable key (missing, over-long) is keyed
// by its IP, never passed unlimited. A client behind one IP gets at most
// (NewKeys + 1) allowances of a rule per Window however many keys it
// invents (NewKeys fresh keys, plus the IP's own). Keys are "seen" globally,
// not per IP: a key introduced from one address is known from any other
// for Window after its introduction, and a key in steady use is charged
// again once per Window (the seen mark is not refreshed on use). When a
// tracker is full (MaxMemory) new keys are charged every time and the
// budget denies new IPs, so the fallback is per-IP limiting: memory
// exhaustion degrades to stricter limiting, never to none.
//
// Safe for concurrent use; two concurrent first requests with one new key
// may both charge the budget (it errs towards the IP fallback).
type KeyBudget struct {
	key      KeyFunc
	ip       KeyFunc
	verified func(string) bool
	seen     *engine.Limiter // SlidingLog, Limit 1: Remaining 0 = seen
	budget   *engine.Limiter // per IP: NewKeys per Window
}

// NewKeyBudget validates cfg and returns a KeyBudget; Close releases it.
func NewKeyBudget(cfg KeyBudgetConfig) (*KeyBudget, error) {
	if cfg.Key == nil {
		return nil, invalidf("KeyBudgetConfig.Key is nil")
	}
	if cfg.NewKeys < 1 {
		return nil, invalidf("KeyBudgetConfig.NewKeys must be >= 1, got %d", cfg.NewKeys)
	}
	if cfg.Window <= 0 || cfg.Window > engine.MaxWindow {
		return nil, invalidf("KeyBudgetConfig.Window must be in (0, %v], got %v", engine.MaxWindow, cfg.Window)
	}
	if cfg.MaxMemory < 0 {
		return nil, invalidf("KeyBudgetConfig.MaxMemory must be >= 0, got %d", cfg.MaxMemory)
	}
	mem := cfg.MaxMemory
	if mem == 0 {
		mem = 16 << 20
	}
	b := &KeyBudget{key: cfg.Key, ip: cfg.IP, verified: cfg.Verified}
	if b.ip == nil {
		k, err := ClientIP(IPConfig{})
		if err != nil {
			return nil, err
		}
		b.ip = k
	}
	var err error
	b.seen, err = engine.New(engine.Config{
		Algorithm: engine.SlidingLog, Limit: 1, Window: cfg.Window,
		MaxMemory: mem, Clock: cfg.Clock, Overflow: engine.OverflowAllow,
	})
	if err != nil {
		return nil, fmt.Errorf("httplimit: KeyBudgetConfig: %w", err)
	}
	b.budget, err = engine.New(engine.Config{
		Algorithm: engine.SlidingLog, Limit: cfg.NewKeys, Window: cfg.Window,
		MaxMemory: mem, Clock: cfg.Clock, Overflow: engine.OverflowDeny,
	})
	if err != nil {
		b.seen.Close()
		return nil, fmt.Errorf("httplimit: KeyBudgetConfig.NewKeys: %w", err)
	}
	return b, nil
}

// Key is the KeyFunc: the client's key while its IP is within budget (or
// the key is seen or verified), else the IP (namespaced). It fails only
// when the IP cannot be found (ErrBadRemoteAddr).
func (b *KeyBudget) Key(r *http.Request) (string, error) {
	k, err := b.key(r)
	if err != nil {
		return b.ipKey(r)
	}
	if b.verified != nil && b.verified(k) {
		return k, nil
	}
	if b.seen.Peek(k).Remaining == 0 {
		return k, nil
	}
	ip, err := b.ip(r)
	if err != nil {
		return "", err
	}
	if !b.budget.AllowN(ip, 1).Allowed {
		return fallbackNS + ip, nil
	}
	b.seen.AllowN(k, 1)
	return k, nil
}

func (b *KeyBudget) ipKey(r *http.Request) (string, error) {
	ip, err := b.ip(r)
	if err != nil {
		return "", err
	}
	return fallbackNS + ip, nil
}

// Close releases the trackers. Key must not be called afterwards.
func (b *KeyBudget) Close() error {
	return errors.Join(b.seen.Close(), b.budget.Close())
}
