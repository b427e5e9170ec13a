package httplimit

import (
	"errors"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/slidelimit/slidelimit/engine"
)

func TestKeyChainFallsBackToIPForMissingOrLongKeys(t *testing.T) {
	ip, err := ClientIP(IPConfig{})
	if err != nil {
		t.Fatal(err)
	}
	chain, err := NewKeyChain(Header("X-Api-Key"), ip)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, key, want string
	}{
		{"api key", "alice", "alice"},
		{"missing", "", "\x001\x00192.0.2.1"},
		{"too long", strings.Repeat("k", MaxKeyLen+1), "\x001\x00192.0.2.1"},
		// An API key spelled like an IP cannot land on that IP's budget.
		{"key spelled as ip", "192.0.2.1", "192.0.2.1"},
	} {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = "192.0.2.1:1234"
		if tc.key != "" {
			r.Header.Set("X-Api-Key", tc.key)
		}
		got, err := chain(r)
		if err != nil || got != tc.want {
			t.Errorf("%s: key %q, %v; want %q", tc.name, got, err, tc.want)
		}
	}
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = "@unix"
	if _, err := chain(r); !errors.Is(err, ErrBadRemoteAddr) {
		t.Errorf("every source failing: err %v, want the last (ErrBadRemoteAddr)", err)
	}
	if _, err := NewKeyChain(); !errors.Is(err, ErrInvalidOptions) {
		t.Errorf("empty chain: %v", err)
	}
	if _, err := NewKeyChain(ip, nil); err == nil || !strings.Contains(err.Error(), "source 1 is nil") {
		t.Errorf("nil source: %v", err)
	}
}

// TestRandomAPIKeysDoNotBypassLimit: with key: header,
// 50 random X-API-Key values at 5/min all passed. With a KeyBudget of 2 new
// keys per IP, one IP gets at most (2+1) x 5 whatever it sends.
func TestRandomAPIKeysDoNotBypassLimit(t *testing.T) {
	clk := newClock()
	kb, err := NewKeyBudget(KeyBudgetConfig{Key: Header("X-Api-Key"), NewKeys: 2, Window: time.Minute, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	defer kb.Close()
	m := mustNew(t, Options{Key: kb.Key, Default: &Rule{Name: "d", Engine: logConfig(5, time.Minute, clk)}})
	h := m.Handler(okHandler)
	passed := 0
	for i := range 50 {
		rec := serveRec(h, "GET", "/", "198.51.100.7:1000", map[string]string{"X-Api-Key": fmt.Sprintf("rnd-%d", i)})
		if rec.Code == 200 {
			passed++
		}
	}
	// Keys 0 and 1 get their own 5 (1 used each); keys 2..49 share the
	// IP's 5.
	if want := 2 + 5; passed != want {
		t.Errorf("50 random keys from one IP: %d passed, want %d", passed, want)
	}
	// Another IP is unaffected and its first keys are its own.
	if rec := serveRec(h, "GET", "/", "198.51.100.8:1000", map[string]string{"X-Api-Key": "other"}); rec.Code != 200 {
		t.Errorf("other IP: %d", rec.Code)
	}
	// A known key keeps working from the exhausted IP.
	if rec := serveRec(h, "GET", "/", "198.51.100.7:1000", map[string]string{"X-Api-Key": "rnd-0"}); rec.Code != 200 {
		t.Errorf("seen key from the same IP: %d, want 200", rec.Code)
	}
	// No key at all: keyed by the IP, which is exhausted.
	if rec := serveRec(h, "GET", "/", "198.51.100.7:1000", nil); rec.Code != 429 {
		t.Errorf("keyless request from the exhausted IP: %d, want 429", rec.Code)
	}
	// After a window the IP may introduce new keys again.
	clk.Advance(time.Minute + time.Second)
	if rec := serveRec(h, "GET", "/", "198.51.100.7:1000", map[string]string{"X-Api-Key": "fresh"}); rec.Code != 200 {
		t.Errorf("new key a window later: %d, want 200", rec.Code)
	}
}

func TestKeyBudgetVerifiedKeysAreNotCharged(t *testing.T) {
	kb, err := NewKeyBudget(KeyBudgetConfig{
		Key: Header("X-Api-Key"), NewKeys: 1, Window: time.Minute, Clock: newClock(),
		Verified: func(k string) bool { return strings.HasPrefix(k, "good-") },
	})
	if err != nil {
		t.Fatal(err)
	}
	defer kb.Close()
	key := func(k string) string {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = "203.0.113.5:1"
		r.Header.Set("X-Api-Key", k)
		got, err := kb.Key(r)
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	for i := range 5 {
		if k := fmt.Sprintf("good-%d", i); key(k) != k {
			t.Fatalf("verified key %s was charged", k)
		}
	}
	if got := key("bad-1"); got != "bad-1" {
		t.Errorf("first unverified key: %q", got)
	}
	if got := key("bad-2"); got != fallbackNS+"203.0.113.5" {
		t.Errorf("second unverified key past budget 1: %q, want the IP", got)
	}
}

func TestNewKeyBudgetRejectsBadConfig(t *testing.T) {
	for _, tc := range []struct {
		cfg  KeyBudgetConfig
		want string
	}{
		{KeyBudgetConfig{NewKeys: 1, Window: time.Second}, "KeyBudgetConfig.Key is nil"},
		{KeyBudgetConfig{Key: Header("K"), Window: time.Second}, "KeyBudgetConfig.NewKeys must be >= 1"},
		{KeyBudgetConfig{Key: Header("K"), NewKeys: 1}, "KeyBudgetConfig.Window must be in"},
		{KeyBudgetConfig{Key: Header("K"), NewKeys: 1, Window: time.Second, MaxMemory: -1}, "KeyBudgetConfig.MaxMemory"},
		{KeyBudgetConfig{Key: Header("K"), NewKeys: engine.MaxLogLimit + 1, Window: time.Second}, "KeyBudgetConfig.NewKeys"},
	} {
		kb, err := NewKeyBudget(tc.cfg)
		if err == nil {
			kb.Close()
			t.Errorf("%+v: no error, want %q", tc.cfg, tc.want)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("error %q does not contain %q", err, tc.want)
		}
	}
}

// TestFailOpenLimitsOverLongKeysByIP: with fail_open
// an over-long key was never limited.
func TestFailOpenLimitsOverLongKeysByIP(t *testing.T) {
	m := mustNew(t, Options{FailOpen: true, Key: Header("X-Api-Key"), Default: &Rule{Name: "d", Engine: logConfig(2, time.Minute, newClock())}})
	h := m.Handler(okHandler)
	passed := 0
	for i := range 10 {
		long := strings.Repeat("x", MaxKeyLen) + fmt.Sprint(i)
		if serveRec(h, "GET", "/", "192.0.2.77:1", map[string]string{"X-Api-Key": long}).Code == 200 {
			passed++
		}
	}
	if passed != 2 {
		t.Errorf("%d of 10 over-long keys passed, want 2 (the IP's limit)", passed)
	}
	if s := m.Stats(); s.Fallbacks != 10 || s.FailedOpen != 0 || s.KeyErrors != 10 {
		t.Errorf("Stats %+v, want 10 fallbacks", s)
	}
}

// TestFailOpenKeyCollisionIsNamespaced: a client whose API key is the text
// of another client's IP does not spend that client's fallback budget.
func TestFailOpenKeyCollisionIsNamespaced(t *testing.T) {
	m := mustNew(t, Options{FailOpen: true, Key: Header("X-Api-Key"), Default: &Rule{Name: "d", Engine: logConfig(1, time.Minute, newClock())}})
	h := m.Handler(okHandler)
	if rec := serveRec(h, "GET", "/", "198.51.100.1:1", map[string]string{"X-Api-Key": "192.0.2.9"}); rec.Code != 200 {
		t.Fatalf("attacker: %d", rec.Code)
	}
	if rec := serveRec(h, "GET", "/", "192.0.2.9:1", nil); rec.Code != 200 {
		t.Errorf("victim without a key, keyed by its IP: %d, want 200", rec.Code)
	}
}
