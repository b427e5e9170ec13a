package httplimit

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/slidelimit/slidelimit/engine"
)

// ErrInvalidOptions is wrapped by every error New and ClientIP return.
var ErrInvalidOptions = errors.New("invalid options")

// Rule is one rate-limit policy and the requests it applies to.
//
// A rule matches a request when each of Method, PathPrefix and Tier is empty
// or matches. The backend is either built by New from Engine (the rule then
// owns it and Close closes it) or given ready in Limiter, in which case
// Limit and Window must describe it: they are what RateLimit-Policy
// advertises.
type Rule struct {
	// Name identifies the policy in the RateLimit headers and namespaces
	// the rule's keys. 1 to 64 bytes of [A-Za-z0-9_.-], unique per
	// Middleware.
	Name string
	// Method, if set, must equal the request method exactly ("GET").
	Method string
	// PathPrefix, if set, must be a path-segment prefix of the request's
	// cleaned URL path: "/api" matches "/api" and "/api/x", not "/apiary".
	PathPrefix string
	// Tier, if set, must equal what Options.Tier returns for the request.
	Tier string

	// Engine configures the in-memory limiter New builds for this rule.
	// Ignored when Limiter is set.
	Engine engine.Config
	// Limiter is a ready backend (for example a redisstore.Store), possibly
	// shared with other rules. Its keys are prefixed with Name and a NUL
	// byte so rules never share state.
	Limiter engine.RateLimiter
	// Limit and Window describe Limiter's policy. Required with Limiter,
	// ignored otherwise (Engine.Limit and Engine.Window are used).
	Limit  int
	Window time.Duration

	// Key names the client for this rule; nil means Options.Key.
	Key KeyFunc
}

// Denial describes a refused request to Options.OnDeny.
type Denial struct {
	Rule     string          // name of the rule that refused it
	Key      string          // the client key, without the rule namespace
	Decision engine.Decision // the backend's answer
}

// Options configures a Middleware.
type Options struct {
	// Rules are tried in order; the first that matches decides.
	Rules []Rule
	// Default decides requests no rule matched. Its Method, PathPrefix
	// and Tier must be empty. Nil means such requests pass unlimited (and
	// are counted as Unmatched).
	Default *Rule
	// Key names the client for rules without their own Key. Nil means
	// the socket IP address, /64 for IPv6, no proxies trusted.
	Key KeyFunc
	// Tier maps a request to its tier name; required if any rule has a
	// Tier. It is called at most once per request.
	Tier func(*http.Request) string
	// DryRun decides, counts and sets the headers but never refuses.
	DryRun bool
	// FailOpen passes a request whose key function failed on unlimited;
	// false refuses it with OnKeyError.
	FailOpen bool
	// OnDeny writes the response to a refused request. The rate-limit
	// headers and Retry-After are already set. Nil writes 429 with a
	// short text body.
	OnDeny func(w http.ResponseWriter, r *http.Request, d Denial)
	// OnKeyError writes the response to a request refused because its key
	// function failed (FailOpen false). Nil writes 400 Bad Request: the
	// request lacks what the policy keys on, and retrying it unchanged
	// cannot help, so 429 would mislead.
	OnKeyError func(w http.ResponseWriter, r *http.Request, err error)
}

// Stats counts what a Middleware did. Each request adds to exactly one of
// Allowed, Denied, DryRunDenied, FailedOpen, FailedClosed, Unmatched;
// KeyErrors = FailedOpen + FailedClosed.
type Stats struct {
	Allowed      uint64 // passed on by a rule
	Denied       uint64 // refused with OnDeny
	DryRunDenied uint64 // would have been refused; passed on (DryRun)
	KeyErrors    uint64 // key function failed
	FailedOpen   uint64 // key function failed; passed on (FailOpen)
	FailedClosed uint64 // key function failed; refused with OnKeyError
	Unmatched    uint64 // no rule and no default rule; passed on
}

// Middleware rate-limits the requests of the handlers it wraps.
type Middleware struct {
	rules    []rule
	def      *rule
	tier     func(*http.Request) string
	dryRun   bool
	failOpen bool
	onDeny   func(http.ResponseWriter, *http.Request, Denial)
	onKeyErr func(http.ResponseWriter, *http.Request, error)
	owned    []*engine.Limiter
	stripes  []statStripe
	mask     uint32
	closed   atomic.Bool
}

// rule is a Rule compiled for the hot path.
type rule struct {
	name     string
	method   string
	prefix   string // cleaned; "" matches every path
	tier     string
	rl       engine.RateLimiter
	ns       string // key namespace ("name\x00"), "" when rl is owned
	key      KeyFunc
	policy   string // RateLimit-Policy value, formatted at New
	limitStr string // X-RateLimit-Limit value
	rlPrefix string // `"name";r=`
}

// cacheLine is the padding unit for the counter stripes: 128 bytes covers
// the 64-byte lines of amd64 plus the adjacent-line prefetcher, and the
// 128-byte lines of some arm64 parts.
const cacheLine = 128

type counters struct {
	allowed, denied, dryRunDenied, failedOpen, failedClosed, unmatched atomic.Uint64
}

// statStripe holds one copy of every counter on its own cache lines. A
// request bumps one counter of a random stripe, so concurrent requests
// rarely write the same line; Stats sums the stripes.
type statStripe struct {
	counters
	_ [cacheLine - unsafe.Sizeof(counters{})%cacheLine]byte
}

// New validates opts and returns a Middleware. Rules built from an
// engine.Config get their own engine.Limiter; Close releases them.
func New(opts Options) (*Middleware, error) {
	m := &Middleware{
		tier:     opts.Tier,
		dryRun:   opts.DryRun,
		failOpen: opts.FailOpen,
		onDeny:   opts.OnDeny,
		onKeyErr: opts.OnKeyError,
	}
	if m.onDeny == nil {
		m.onDeny = defaultDeny
	}
	if m.onKeyErr == nil {
		m.onKeyErr = defaultKeyError
	}
	defKey := opts.Key
	if defKey == nil {
		k, err := ClientIP(IPConfig{})
		if err != nil {
			return nil, err
		}
		defKey = k
	}
	names := map[string]bool{}
	fail := func(err error) (*Middleware, error) {
		m.Close()
		return nil, err
	}
	for i := range opts.Rules {
		where := fmt.Sprintf("Rules[%d]", i)
		ru, err := m.compile(&opts.Rules[i], where, defKey, names)
		if err != nil {
			return fail(err)
		}
		if ru.tier != "" && m.tier == nil {
			return fail(invalidf("%s (%s).Tier is %q but Options.Tier is nil", where, ru.name, ru.tier))
		}
		m.rules = append(m.rules, ru)
	}
	if d := opts.Default; d != nil {
		if d.Method != "" || d.PathPrefix != "" || d.Tier != "" {
			return fail(invalidf("Default (%s) must not set Method, PathPrefix or Tier", d.Name))
		}
		ru, err := m.compile(d, "Default", defKey, names)
		if err != nil {
			return fail(err)
		}
		m.def = &ru
	}
	n := 1
	for n < min(runtime.GOMAXPROCS(0), 64) {
		n <<= 1
	}
	m.stripes = make([]statStripe, n)
	m.mask = uint32(n - 1)
	return m, nil
}

func invalidf(format string, args ...any) error {
	return fmt.Errorf("httplimit: "+format+": %w", append(args, ErrInvalidOptions)...)
}

func validName(s string) bool {
	if len(s) == 0 || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '.' || c == '-') {
			return false
		}
	}
	return true
}

func (m *Middleware) compile(r *Rule, where string, defKey KeyFunc, names map[string]bool) (rule, error) {
	if !validName(r.Name) {
		return rule{}, invalidf("%s.Name %q must be 1 to 64 bytes of [A-Za-z0-9_.-]", where, r.Name)
	}
	if names[r.Name] {
		return rule{}, invalidf("%s.Name %q is used by another rule", where, r.Name)
	}
	names[r.Name] = true
	ru := rule{name: r.Name, method: r.Method, tier: r.Tier, key: r.Key}
	if ru.key == nil {
		ru.key = defKey
	}
	if r.PathPrefix != "" {
		if !strings.HasPrefix(r.PathPrefix, "/") {
			return rule{}, invalidf("%s (%s).PathPrefix %q must start with /", where, r.Name, r.PathPrefix)
		}
		ru.prefix = cleanPath(r.PathPrefix)
	}
	limit, window := r.Limit, r.Window
	if r.Limiter != nil {
		if r.Engine.Limit != 0 || r.Engine.Window != 0 || r.Engine.Algorithm != 0 {
			return rule{}, invalidf("%s (%s) sets both Limiter and Engine", where, r.Name)
		}
		if limit <= 0 {
			return rule{}, invalidf("%s (%s).Limit must be > 0 with Limiter, got %d", where, r.Name, limit)
		}
		if window <= 0 {
			return rule{}, invalidf("%s (%s).Window must be > 0 with Limiter, got %v", where, r.Name, window)
		}
		ru.rl = r.Limiter
		ru.ns = r.Name + "\x00"
	} else {
		l, err := engine.New(r.Engine)
		if err != nil {
			return rule{}, fmt.Errorf("httplimit: %s (%s).Engine: %w", where, r.Name, err)
		}
		m.owned = append(m.owned, l)
		ru.rl = l
		limit, window = r.Engine.Limit, r.Engine.Window
	}
	ru.policy = policyValue(r.Name, limit, window)
	ru.limitStr = strconv.Itoa(limit)
	ru.rlPrefix = `"` + r.Name + `";r=`
	return ru, nil
}

// policyValue formats RateLimit-Policy. The draft's w is a whole number of
// seconds; a window that is not one is left out (w is optional) rather
// than rounded into a claim about a different rate.
func policyValue(name string, limit int, window time.Duration) string {
	v := `"` + name + `";q=` + strconv.Itoa(limit)
	if window%time.Second == 0 {
		v += ";w=" + strconv.FormatInt(int64(window/time.Second), 10)
	}
	return v
}

// Close closes the engine limiters New built. The Middleware must not be
// used afterwards; Close is safe to call more than once.
func (m *Middleware) Close() error {
	if m.closed.Swap(true) {
		return nil
	}
	var errs []error
	for _, l := range m.owned {
		errs = append(errs, l.Close())
	}
	return errors.Join(errs...)
}

// Stats returns the counters summed over all stripes.
func (m *Middleware) Stats() Stats {
	var s Stats
	for i := range m.stripes {
		c := &m.stripes[i]
		s.Allowed += c.allowed.Load()
		s.Denied += c.denied.Load()
		s.DryRunDenied += c.dryRunDenied.Load()
		s.FailedOpen += c.failedOpen.Load()
		s.FailedClosed += c.failedClosed.Load()
		s.Unmatched += c.unmatched.Load()
	}
	s.KeyErrors = s.FailedOpen + s.FailedClosed
	return s
}

// EngineStats sums engine.Stats over the engine limiters New built for
// rules given an engine.Config (not over rules given a ready Limiter), for
// debug endpoints such as package pprof's /debug/limiter.
func (m *Middleware) EngineStats() engine.Stats {
	var s engine.Stats
	for _, l := range m.owned {
		o := l.Stats()
		s.Keys += o.Keys
		s.MaxKeys += o.MaxKeys
		s.Allowed += o.Allowed
		s.Denied += o.Denied
		s.Inserts += o.Inserts
		s.Reclaimed += o.Reclaimed
		s.Overflow += o.Overflow
		s.Bytes += o.Bytes
	}
	return s
}

// stripe picks a counter stripe. math/rand/v2's top-level functions read a
// per-thread generator without locking, so this costs a few nanoseconds
// and spreads concurrent requests over the stripes.
func (m *Middleware) stripe() *counters {
	return &m.stripes[rand.Uint32()&m.mask].counters
}

// Handler wraps next. Its method value has the middleware shape
// func(http.Handler) http.Handler.
func (m *Middleware) Handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		m.serve(w, r, next)
	})
}

func (m *Middleware) match(r *http.Request) *rule {
	var tier string
	tierDone := false
	var p string
	pathDone := false
	for i := range m.rules {
		ru := &m.rules[i]
		if ru.method != "" && ru.method != r.Method {
			continue
		}
		if ru.prefix != "" {
			if !pathDone {
				p, pathDone = cleanPath(r.URL.Path), true
			}
			if !pathHasPrefix(p, ru.prefix) {
				continue
			}
		}
		if ru.tier != "" {
			if !tierDone {
				tier, tierDone = m.tier(r), true
			}
			if tier != ru.tier {
				continue
			}
		}
		return ru
	}
	return m.def
}

// pathHasPrefix reports whether prefix is a whole-segment prefix of p; both
// are clean paths.
func pathHasPrefix(p, prefix string) bool {
	if !strings.HasPrefix(p, prefix) {
		return false
	}
	return len(p) == len(prefix) || prefix[len(prefix)-1] == '/' || p[len(prefix)] == '/'
}

func (m *Middleware) serve(w http.ResponseWriter, r *http.Request, next http.Handler) {
	ru := m.match(r)
	if ru == nil {
		m.stripe().unmatched.Add(1)
		next.ServeHTTP(w, r)
		return
	}
	key, err := ru.key(r)
	if err != nil {
		if m.failOpen {
			m.stripe().failedOpen.Add(1)
			next.ServeHTTP(w, r)
			return
		}
		m.stripe().failedClosed.Add(1)
		m.onKeyErr(w, r, err)
		return
	}
	nsKey := key
	if ru.ns != "" {
		nsKey = ru.ns + key
	}
	d := ru.rl.AllowN(nsKey, 1)
	h := w.Header()
	ru.setHeaders(h, &d)
	if d.Allowed {
		m.stripe().allowed.Add(1)
		next.ServeHTTP(w, r)
		return
	}
	if m.dryRun {
		m.stripe().dryRunDenied.Add(1)
		next.ServeHTTP(w, r)
		return
	}
	m.stripe().denied.Add(1)
	h[hdrRetryAfter] = []string{strconv.FormatInt(max(ceilSeconds(d.RetryAfter), 1), 10)}
	m.onDeny(w, r, Denial{Rule: ru.name, Key: key, Decision: d})
}

// Canonical (textproto) forms, so the hot path can assign to the header
// map without canonicalizing on every request.
const (
	hdrPolicy     = "Ratelimit-Policy"
	hdrRateLimit  = "Ratelimit"
	hdrXLimit     = "X-Ratelimit-Limit"
	hdrXRemaining = "X-Ratelimit-Remaining"
	hdrXReset     = "X-Ratelimit-Reset"
	hdrRetryAfter = "Retry-After"
)

// ceilSeconds rounds d up to whole seconds; d <= 0 gives 0.
func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}

// setHeaders writes the five rate-limit headers with two allocations: one
// string holding every per-request value (sliced into the three values) and
// one []string backing the five header value lists. Each list gets a
// capacity-limited slice, so a later Header.Add on one copies instead of
// overwriting its neighbour.
func (ru *rule) setHeaders(h http.Header, d *engine.Decision) {
	remaining := int64(max(d.Remaining, 0))
	reset := ceilSeconds(d.ResetAfter)
	// RateLimit's t is the window in which the client can use no more
	// than r: when refused, until the retry can pass; otherwise until the
	// window is empty (an upper bound for a sliding window, which frees
	// quota gradually; the draft allows that).
	t := reset
	if !d.Allowed {
		remaining = 0
		t = max(ceilSeconds(d.RetryAfter), 1)
	}
	var buf [160]byte
	b := append(buf[:0], ru.rlPrefix...)
	b = strconv.AppendInt(b, remaining, 10)
	b = append(b, ";t="...)
	b = strconv.AppendInt(b, t, 10)
	endRL := len(b)
	b = strconv.AppendInt(b, remaining, 10)
	endRem := len(b)
	b = strconv.AppendInt(b, reset, 10)
	s := string(b)

	vals := make([]string, 5)
	vals[0] = ru.policy
	vals[1] = s[:endRL]
	vals[2] = ru.limitStr
	vals[3] = s[endRL:endRem]
	vals[4] = s[endRem:]
	h[hdrPolicy] = vals[0:1:1]
	h[hdrRateLimit] = vals[1:2:2]
	h[hdrXLimit] = vals[2:3:3]
	h[hdrXRemaining] = vals[3:4:4]
	h[hdrXReset] = vals[4:5:5]
}

func defaultDeny(w http.ResponseWriter, _ *http.Request, _ Denial) {
	h := w.Header()
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusTooManyRequests)
	_, _ = w.Write([]byte("429 too many requests\n"))
}

func defaultKeyError(w http.ResponseWriter, _ *http.Request, _ error) {
	// The error text stays out of the response: it may name headers or
	// internals the client has no business seeing.
	http.Error(w, "400 bad request: no rate-limit key", http.StatusBadRequest)
}
