package httplimit

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/slidelimit/slidelimit/engine"
)

// ErrInvalidOptions is wrapped by every error New and ClientIP return.
var ErrInvalidOptions = errors.New("invalid options")

// ErrNoRules is wrapped (beside ErrInvalidOptions) by the error New
// returns for Options with no rule and no default rule: such a Middleware
// would pass every request on unlimited, which is never what a caller of
// a rate limiter meant (the zero Options, a rule list left empty by a
// config loader).
var ErrNoRules = errors.New("no rule limits any request")

// Rule is one rate-limit policy and the requests it applies to.
//
// A rule matches a request when each of Method, PathPrefix and Tier is empty
// or matches. The backend is either built by New from Engine (the rule then
// owns it and Close closes it; every engine.Config field is taken through,
// GCRA's Burst and MaxLimit included) or given ready in Limiter, in which
// case Limit and Window must describe it: they are what RateLimit-Policy
// advertises. A ready Limiter that says its own numbers (an *engine.Limiter,
// or a backend whose Config() result has Limit and Window fields, such as
// redisstore.Store) is read at New: Limit and Window may then be left zero,
// and New refuses a Rule whose Limit or Window differs from the Limiter's.
//
// What RateLimit-Policy advertises: q is the quota a client can use at
// once, Decision.Limit (Limit; GCRA: its Burst), and w is the window in
// seconds, rounded up (GCRA: the time a full bucket takes to refill,
// Burst x Window / Limit, rounded up). Middleware.SetLimit and SetBurst
// change both on a running Middleware.
type Rule struct {
	// Name identifies the policy in the RateLimit headers and namespaces
	// the rule's keys. 1 to 64 bytes of [A-Za-z0-9_.-], unique per
	// Middleware.
	Name string
	// Method, if set, is the request method ("POST"). It is matched
	// ignoring case ("post" too: net/http accepts it and Flask or Rails
	// route it as POST), GET also matches HEAD, which most frameworks
	// route to the GET handler, and a POST whose X-HTTP-Method-Override
	// (X-HTTP-Method, X-Method-Override) names Method matches too.
	Method string
	// PathPrefix, if set, must be a path-segment prefix of the request's
	// URL path: "/api" matches "/api" and "/api/x", not "/apiary". Paths
	// are matched in the spelling-insensitive form an upstream may route
	// them by: ignoring case, ";params", with backslashes as slashes,
	// cleaned, and with or without a format suffix on the last segment
	// (cut at any of its dots: "/login" matches "/LOGIN",
	// "/login;jsessionid=1", "/login.json", "/login.x.y", "/x/..;/login"),
	// with escapes decoded until none is left, cut at a NUL, "?" or "#",
	// without trailing dots and whitespace (Unicode's too) on a segment,
	// without zero-width characters, and with fullwidth and overlong
	// UTF-8 forms of ASCII read as ASCII ("/%256cogin", "/login%20",
	// "/login..", "/login%00", "/login%3fx", "/%e2%80%8blogin" too). A request
	// whose X-Original-URL or X-Rewrite-URL path (headers some servers
	// route by instead of the request line) matches also matches. A rule
	// therefore limits every spelling that some server routes to its
	// prefix.
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
	// Limit and Window describe Limiter's policy. Required with a Limiter
	// that does not say its own numbers (see Rule), checked against those
	// of one that does, ignored without Limiter (Engine.Limit and
	// Engine.Window are used).
	Limit  int
	Window time.Duration

	// Key names the client for this rule; nil means Options.Key.
	Key KeyFunc

	// DryRun puts this rule in shadow: it decides, counts and advertises
	// every request (the RateLimit headers say r=0 where it would refuse)
	// but refuses none, counting a refusal as DryRunDenied. Nil takes
	// Options.DryRun; false enforces the rule under a global DryRun, so
	// one rule can enforce while the rest are shadow-tested, or the other
	// way round. A shadow rule never changes what happens to a request:
	// the rules that would decide it without the shadow rule still do
	// (Options.Rules, Options.Default), a key the rule cannot find
	// refuses nothing (it counts a key error and leaves the request to
	// the others), and see Options.MatchAll for what it consumes.
	DryRun *bool
	// EnforcePercent, in [0, 100] (fractions allowed; nil: 100), is the
	// share of keys this rule enforces, for a canary rollout: the other
	// keys are in its shadow cohort, decided as under DryRun. A key's
	// cohort is a fixed hash of the rule's name and the key, so a client
	// is consistently in or out, across requests, reloads, restarts and
	// replicas, and a change of the percentage moves only the keys
	// between the old and new threshold (raising 1 to 5 keeps the 1 %
	// enforced). NaN or a value outside [0, 100] is refused by New.
	// Ignored while the rule is in shadow (DryRun). RuleStats and
	// Event.Shadow tell the cohorts apart, so their refusal rates can be
	// compared.
	EnforcePercent *float64

	// RemainingUnknown says that Limiter's Decision.Remaining is not the
	// policy's remaining quota (redisstore.Hybrid reports its own node's
	// unspent lease, 0 while the global quota has room). An admitted
	// request then carries no RateLimit item and no
	// X-RateLimit-Remaining or -Reset for this rule rather than a wrong
	// one; RateLimit-Policy still names it, and a refusal still carries
	// r=0, t and Retry-After from the Decision.
	RemainingUnknown bool
}

// Denial describes a refused request to Options.OnDeny.
type Denial struct {
	Rule     string          // name of the rule that refused it (the longest wait when several did)
	Key      string          // the client key, without the rule namespace
	Decision engine.Decision // the backend's answer
	// RetryAfter is what the Retry-After header says, in whole seconds:
	// the longest wait of every enforcing policy the response reports, so
	// it is never earlier than another enforcing policy's t (a policy in
	// shadow holds the client to nothing, so its t does not count).
	RetryAfter time.Duration
}

// UpstreamHeaders says whose rate-limit headers a response carries when
// the wrapped handler (an upstream behind httputil.ReverseProxy, say) sets
// RateLimit, RateLimit-Policy or X-RateLimit-* itself.
type UpstreamHeaders uint8

const (
	// UpstreamOurs (the default) sets the middleware's values when the
	// handler commits its response (WriteHeader, Write, Flush, Hijack, or
	// returning), replacing whatever it set or added: a client never sees
	// two conflicting X-RateLimit-Limit values. The handler does not see
	// them in its header map; choose UpstreamTheirs or UpstreamUnchecked
	// for a handler that reads them.
	UpstreamOurs UpstreamHeaders = iota
	// UpstreamTheirs lets a handler's values replace the middleware's in
	// each header it set or added; headers it left alone keep ours.
	UpstreamTheirs
	// UpstreamUnchecked hands the handler the ResponseWriter unwrapped and
	// leaves the headers as the handler leaves them: what it adds is sent
	// beside ours. The cheapest choice (no wrapper calls, no header
	// re-check at commit), for handlers that never set these headers or a
	// proxy that calls StripRateLimitHeaders on the upstream's response.
	UpstreamUnchecked
)

// Options configures a Middleware.
type Options struct {
	// Rules are tried in order; the first that matches decides, or, with
	// MatchAll, every rule that matches applies. A rule on trial (DryRun,
	// or EnforcePercent below 100) takes no request away from the rules
	// that enforce it without it: where the rule decides the key in
	// shadow, the next matching rule that enforces the key (else the
	// default, if it does) applies beside it, as it did before the rule
	// on trial was added.
	Rules []Rule
	// MatchAll applies every matching rule (stacked limits: 5/min on POST
	// /login and 1000/min per client overall). The request is refused if
	// any rule refuses, and then nothing is consumed from the others:
	// every rule is peeked first, and only if all have room is each
	// taken, in order. A concurrent request can fill a rule between the
	// peek and the take; the request is then refused and the units taken
	// from the rules before it stay taken (no limit is ever exceeded; the
	// client loses at most one unit per such race). The headers list
	// every policy that applied.
	//
	// With rules in shadow (DryRun, or a key outside EnforcePercent) only
	// the enforcing rules refuse, and they count what really happens: each
	// takes a unit from every request that passes, as if the shadow rules
	// were not there. A shadow rule counts what would happen if every rule
	// enforced: it takes a unit only from a request that no applied rule
	// refuses or would refuse (so a shadow-only stack, or a global DryRun,
	// consumes nothing on a would-be refusal, as before).
	MatchAll bool
	// Default decides requests no rule matched, and enforces those that
	// only rules on trial matched and decide in shadow (see Rules). Its Method, PathPrefix
	// and Tier must be empty. Nil means such requests pass unlimited (and
	// are counted as Unmatched); Rules and Default must not both be empty
	// (New returns ErrNoRules).
	Default *Rule
	// Key names the client for rules without their own Key. Nil means
	// the socket IP address, /64 for IPv6, no proxies trusted.
	Key KeyFunc
	// Tier maps a request to its tier name; required if any rule has a
	// Tier. It is called at most once per request.
	Tier func(*http.Request) string
	// DryRun decides, counts and sets the headers but never refuses:
	// the default of every rule whose Rule.DryRun is nil.
	DryRun bool
	// FailOpen keys a request whose key function failed by FallbackKey
	// instead (namespaced apart from the rule's own keys), so a missing or
	// over-long API key is limited per client IP rather than refused; only
	// if FallbackKey fails too is the request passed on unlimited. False
	// refuses it with OnKeyError.
	FailOpen bool
	// FallbackKey keys requests whose key failed, with FailOpen. Nil
	// means the socket IP address, /64 for IPv6, no proxies trusted.
	FallbackKey KeyFunc
	// Exempt lists requests that are never limited (no quota, no headers).
	Exempt Exemptions
	// Preflight, if set, decides CORS preflights (OPTIONS with Origin and
	// Access-Control-Request-Method) on a quota of their own: no other
	// rule sees them, so a browser's preflight never spends the quota of
	// the request it precedes, yet a client cannot send an unlimited
	// stream of them to the upstream either. Its Method, PathPrefix and
	// Tier must be empty. Nil passes preflights on unlimited (counted as
	// Exempt).
	Preflight *Rule
	// Upstream says whose rate-limit headers win when the handler sets
	// its own. The zero value is UpstreamOurs.
	Upstream UpstreamHeaders
	// OnDeny writes the response to a refused request. The rate-limit
	// headers and Retry-After are already set. Nil means DenyProblem
	// (429, application/problem+json); DenyText writes text/plain.
	OnDeny func(w http.ResponseWriter, r *http.Request, d Denial)
	// OnKeyError writes the response to a request refused because its key
	// function failed (FailOpen false). Nil writes 400 Bad Request: the
	// request lacks what the policy keys on, and retrying it unchanged
	// cannot help, so 429 would mislead.
	OnKeyError func(w http.ResponseWriter, r *http.Request, err error)
	// Observe, if set, is called once per rule that decided a request,
	// synchronously, before the request is passed on or refused: feed
	// metrics or a sampled log from it, and keep it fast. Setting it
	// makes the middleware read the clock twice per request for
	// Event.Latency. A key error that FailOpen recovered with FallbackKey
	// is reported with the fallback decision's outcome (and counted in
	// RuleStats.KeyErrors and Stats.Fallbacks).
	Observe func(r *http.Request, e Event)
}

// Stats counts what a Middleware did. Each request adds to exactly one of
// Allowed, Denied, DryRunDenied, FailedOpen, FailedClosed, Unmatched,
// Exempt; KeyErrors = FailedOpen + FailedClosed + Fallbacks.
type Stats struct {
	Allowed      uint64 // passed on by its rules
	Denied       uint64 // refused with OnDeny
	DryRunDenied uint64 // would have been refused by a rule in shadow (DryRun, or outside EnforcePercent); passed on
	KeyErrors    uint64 // key function failed
	FailedOpen   uint64 // key function and FallbackKey failed; passed on unlimited (FailOpen)
	FailedClosed uint64 // key function failed; refused with OnKeyError
	Unmatched    uint64 // no rule and no default rule; passed on
	Exempt       uint64 // exempt (Options.Exempt, CORS preflight); passed on
	Fallbacks    uint64 // key function failed; decided by FallbackKey (FailOpen), also counted as decided
}

// Middleware rate-limits the requests of the handlers it wraps.
type Middleware struct {
	rules       []rule
	def         *rule
	preflight   *rule
	tier        func(*http.Request) string
	matchAll    bool
	dryRun      bool
	failOpen    bool
	fallback    KeyFunc
	exempt      exemptions
	upstream    UpstreamHeaders
	onDeny      func(http.ResponseWriter, *http.Request, Denial)
	onKeyErr    func(http.ResponseWriter, *http.Request, error)
	observe     func(*http.Request, Event)
	owned       []*engine.Limiter
	stripes     []statStripe
	ruleStripes []ruleStripe // len(stripes) x nRules, stripe-major
	nRules      int
	mask        uint32
	closed      atomic.Bool

	byName   map[string]*rule         // every rule (Default and Preflight too), for SetLimit
	liveMu   sync.Mutex               // serializes SetLimit and SetBurst
	burstSet map[*engine.Limiter]bool // GCRA limiters whose burst no longer follows the limit; under liveMu
}

// rule is a Rule compiled for the hot path.
type rule struct {
	idx      int // index into each stripe's rule counters
	name     string
	method   string // upper case; "" matches every method
	prefix   string // canonical (routePath); "" matches every path
	tier     string
	eng      *engine.Limiter    // the owned engine, called directly; nil with a ready Limiter
	rl       engine.RateLimiter // the ready backend, when eng is nil
	adj      *engine.Limiter    // the limiter SetLimit changes: eng, or a ready *engine.Limiter; nil if none
	ns       string             // key namespace ("name\x00"), "" when rl is owned
	key      KeyFunc
	live     *live  // the advertised policy, replaced by SetLimit and SetBurst
	rlPrefix string // `"name";r=`
	cohort   cohort // DryRun and EnforcePercent

	remUnknown bool // Rule.RemainingUnknown
}

// cacheLine is the padding unit for the counter stripes: 128 bytes covers
// the 64-byte lines of amd64 plus the adjacent-line prefetcher, and the
// 128-byte lines of some arm64 parts.
const cacheLine = 128

type counters struct {
	allowed, denied, dryRunDenied, failedOpen, failedClosed, unmatched, exempt, fallbacks atomic.Uint64
}

// statStripe holds one copy of every counter on its own cache lines. A
// request bumps one counter of a random stripe, so concurrent requests
// rarely write the same line; Stats sums the stripes.
type statStripe struct {
	counters
	_ [cacheLine - unsafe.Sizeof(counters{})%cacheLine]byte
}

// ruleCounters are one rule's. Denied counts the enforced cohort only and
// dryRunDenied the shadow cohort only; allowed counts both, and
// shadowAllowed the shadow cohort's part of it.
type ruleCounters struct {
	allowed, denied, dryRunDenied, keyErrors, backendErrors, shadowAllowed atomic.Uint64
}

// ruleStripe is one rule's counters in one stripe, padded like statStripe.
type ruleStripe struct {
	ruleCounters
	_ [cacheLine - unsafe.Sizeof(ruleCounters{})%cacheLine]byte
}

// New validates opts and returns a Middleware. Rules built from an
// engine.Config get their own engine.Limiter; Close releases them. Options
// with neither Rules nor Default are an error wrapping ErrNoRules.
func New(opts Options) (*Middleware, error) {
	m := &Middleware{
		tier:     opts.Tier,
		matchAll: opts.MatchAll,
		dryRun:   opts.DryRun,
		failOpen: opts.FailOpen,
		fallback: opts.FallbackKey,
		upstream: opts.Upstream,
		onDeny:   opts.OnDeny,
		onKeyErr: opts.OnKeyError,
		observe:  opts.Observe,
		burstSet: map[*engine.Limiter]bool{},
	}
	if m.onDeny == nil {
		m.onDeny = DenyProblem
	}
	if m.onKeyErr == nil {
		m.onKeyErr = defaultKeyError
	}
	if m.upstream > UpstreamUnchecked {
		return nil, invalidf("Options.Upstream %d is not UpstreamOurs, UpstreamTheirs or UpstreamUnchecked", m.upstream)
	}
	ipKey := func() (KeyFunc, error) { return ClientIP(IPConfig{}) }
	defKey := opts.Key
	if defKey == nil {
		k, err := ipKey()
		if err != nil {
			return nil, err
		}
		defKey = k
	}
	if m.fallback == nil {
		k, err := ipKey()
		if err != nil {
			return nil, err
		}
		m.fallback = k
	}
	ex, err := compileExemptions(opts.Exempt)
	if err != nil {
		return nil, err
	}
	m.exempt = ex
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
		ru.idx = len(m.rules)
		m.rules = append(m.rules, ru)
	}
	m.nRules = len(m.rules)
	if m.def, err = m.compileCatchAll(opts.Default, "Default", defKey, names); err != nil {
		return fail(err)
	}
	if m.preflight, err = m.compileCatchAll(opts.Preflight, "Preflight", defKey, names); err != nil {
		return fail(err)
	}
	if len(m.rules) == 0 && m.def == nil {
		return fail(fmt.Errorf("httplimit: Options.Rules is empty and Options.Default is nil: %w: %w", ErrNoRules, ErrInvalidOptions))
	}
	n := 1
	for n < min(runtime.GOMAXPROCS(0), 64) {
		n <<= 1
	}
	m.stripes = make([]statStripe, n)
	m.ruleStripes = make([]ruleStripe, n*max(m.nRules, 1))
	m.mask = uint32(n - 1)
	m.byName = make(map[string]*rule, m.nRules)
	for i := range m.rules {
		m.byName[m.rules[i].name] = &m.rules[i]
	}
	for _, r := range []*rule{m.def, m.preflight} {
		if r != nil {
			m.byName[r.name] = r
		}
	}
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

// compileCatchAll compiles a rule that takes every request it is asked
// about (Default, Preflight), so it must not match on anything; nil gives
// nil.
func (m *Middleware) compileCatchAll(r *Rule, where string, defKey KeyFunc, names map[string]bool) (*rule, error) {
	if r == nil {
		return nil, nil
	}
	if r.Method != "" || r.PathPrefix != "" || r.Tier != "" {
		return nil, invalidf("%s (%s) must not set Method, PathPrefix or Tier", where, r.Name)
	}
	ru, err := m.compile(r, where, defKey, names)
	if err != nil {
		return nil, err
	}
	ru.idx = m.nRules
	m.nRules++
	return &ru, nil
}

func (m *Middleware) compile(r *Rule, where string, defKey KeyFunc, names map[string]bool) (rule, error) {
	if !validName(r.Name) {
		return rule{}, invalidf("%s.Name %q must be 1 to 64 bytes of [A-Za-z0-9_.-]", where, r.Name)
	}
	if names[r.Name] {
		return rule{}, invalidf("%s.Name %q is used by another rule", where, r.Name)
	}
	names[r.Name] = true
	ru := rule{name: r.Name, method: strings.ToUpper(r.Method), tier: r.Tier, key: r.Key, remUnknown: r.RemainingUnknown}
	var err error
	if ru.cohort, err = newCohort(r, m.dryRun, where); err != nil {
		return rule{}, err
	}
	if ru.key == nil {
		ru.key = defKey
	}
	if r.Method != "" && !validMethod(r.Method) {
		return rule{}, invalidf("%s (%s).Method %q is not an HTTP method", where, r.Name, r.Method)
	}
	if r.PathPrefix != "" {
		if !strings.HasPrefix(r.PathPrefix, "/") {
			return rule{}, invalidf("%s (%s).PathPrefix %q must start with /", where, r.Name, r.PathPrefix)
		}
		ru.prefix = routePath(r.PathPrefix)
	}
	var sh shape
	if r.Limiter != nil {
		e := &r.Engine
		if e.Limit != 0 || e.Window != 0 || e.Algorithm != 0 || e.Burst != 0 || e.MaxLimit != 0 {
			return rule{}, invalidf("%s (%s) sets both Limiter and Engine", where, r.Name)
		}
		sh = shape{limit: r.Limit, burst: r.Limit, window: r.Window}
		if got, ok := limiterShape(r.Limiter); ok {
			// The backend says its numbers: advertise them, and refuse
			// a Rule that would advertise others.
			if r.Limit != 0 && r.Limit != got.limit {
				return rule{}, invalidf("%s (%s).Limit is %d but its Limiter's Limit is %d", where, r.Name, r.Limit, got.limit)
			}
			if r.Window != 0 && r.Window != got.window {
				return rule{}, invalidf("%s (%s).Window is %v but its Limiter's Window is %v", where, r.Name, r.Window, got.window)
			}
			sh = got
		}
		if sh.limit <= 0 {
			return rule{}, invalidf("%s (%s).Limit must be > 0 with Limiter, got %d", where, r.Name, sh.limit)
		}
		if sh.window <= 0 || sh.window > engine.MaxWindow {
			return rule{}, invalidf("%s (%s).Window must be in (0, %v] with Limiter, got %v", where, r.Name, engine.MaxWindow, sh.window)
		}
		ru.rl = r.Limiter
		ru.adj, _ = r.Limiter.(*engine.Limiter)
		ru.ns = r.Name + "\x00"
	} else {
		l, err := engine.New(r.Engine)
		if err != nil {
			return rule{}, fmt.Errorf("httplimit: %s (%s).Engine: %w", where, r.Name, err)
		}
		m.owned = append(m.owned, l)
		ru.eng = l
		ru.rl = l
		ru.adj = l
		if r.Engine.Burst != 0 {
			m.burstSet[l] = true // an explicit burst does not follow SetLimit
		}
		sh = shapeOf(l.Config())
	}
	ru.live = &live{}
	ru.live.pol.Store(newPolicy(r.Name, sh))
	ru.rlPrefix = `"` + r.Name + `";r=`
	return ru, nil
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
		s.Exempt += c.exempt.Load()
		s.Fallbacks += c.fallbacks.Load()
	}
	s.KeyErrors = s.FailedOpen + s.FailedClosed + s.Fallbacks
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
		s.Invalid += o.Invalid
		s.Inserts += o.Inserts
		s.Reclaimed += o.Reclaimed
		s.Overflow += o.Overflow
		s.Bytes += o.Bytes
	}
	return s
}

// stripe picks a counter stripe index. math/rand/v2's top-level functions
// read a per-thread generator without locking, so this costs a few
// nanoseconds and spreads concurrent requests over the stripes.
func (m *Middleware) stripe() uint32 { return rand.Uint32() & m.mask }

func (m *Middleware) counters(s uint32) *counters { return &m.stripes[s].counters }

func (m *Middleware) ruleCounters(s uint32, ru *rule) *ruleCounters {
	return &m.ruleStripes[int(s)*m.nRules+ru.idx].ruleCounters
}

// Handler wraps next. Its method value has the middleware shape
// func(http.Handler) http.Handler.
func (m *Middleware) Handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		m.serve(w, r, next)
	})
}

// matcher matches rules against one request, computing the cleaned path
// and the tier at most once.
type matcher struct {
	m        *Middleware
	r        *http.Request
	path     string
	pathDone bool
	tier     string
	tierDone bool
}

func (mt *matcher) matches(ru *rule) bool {
	if ru.method != "" && !methodMatches(ru.method, mt.r) {
		return false
	}
	if ru.prefix != "" {
		if !mt.pathDone {
			mt.path, mt.pathDone = routePath(mt.r.URL.Path), true
		}
		if !matchPath(mt.path, ru.prefix) && !overrideMatches(mt.r, ru.prefix) {
			return false
		}
	}
	if ru.tier != "" {
		if !mt.tierDone {
			mt.tier, mt.tierDone = mt.m.tier(mt.r), true
		}
		if mt.tier != ru.tier {
			return false
		}
	}
	return true
}

// maxInline is how many applied rules a request tracks without allocating.
const maxInline = 4

// applied is one rule's part in a request's decision.
type applied struct {
	ru    *rule
	key   string // without namespace
	nsKey string
	d     engine.Decision
	t     int64   // the RateLimit t; -1: left out (see timing)
	reset int64   // the X-RateLimit-Reset value; -1: left out
	err   error   // backend error, if any
	taken bool    // d came from a take (else from a peek)
	pol   *policy // the rule's advertised policy for d (set by timing)
	// shadow: the rule decides this key in shadow (Rule.DryRun, or the
	// key outside Rule.EnforcePercent): it refuses nothing.
	shadow bool
	// standIn: the rule applies only in place of rules on trial (see
	// collect): if it enforces the request's key and no rule before it
	// does.
	standIn bool
}

// serve runs one request through its phases: exemption, matching, keys,
// decision, response.
func (m *Middleware) serve(w http.ResponseWriter, r *http.Request, next http.Handler) {
	s := m.stripe()
	if m.exempt.any && m.exempt.match(r) {
		m.counters(s).exempt.Add(1)
		next.ServeHTTP(w, r)
		return
	}
	var buf [maxInline]applied
	var as []applied
	if r.Method == http.MethodOptions && isPreflight(r) {
		if m.preflight == nil {
			m.counters(s).exempt.Add(1)
			next.ServeHTTP(w, r)
			return
		}
		as = append(buf[:0], applied{ru: m.preflight})
	} else {
		as = m.collect(r, buf[:0])
	}
	if len(as) == 0 {
		m.counters(s).unmatched.Add(1)
		next.ServeHTTP(w, r)
		return
	}
	var start time.Time
	if m.observe != nil {
		start = time.Now()
	}
	as, ok := m.resolveKeys(w, r, next, s, as, start)
	if !ok {
		return
	}
	denied := decide(r.Context(), as)
	h := w.Header()
	expose := len(r.Header["Origin"]) > 0
	if expose {
		h[hdrExpose] = append(h[hdrExpose], exposeValue)
	}
	if denied < 0 {
		m.admit(w, h, r, next, s, as, start, expose)
		return
	}
	m.refuse(w, h, r, s, as, start, denied, expose)
}

// admit counts and passes on a request that no enforcing rule refused. A
// rule in shadow that refused it counts it as DryRunDenied (and so does
// the Middleware); a rule that admitted it but took nothing (a shadow
// rule left alone because another would refuse: see Options.MatchAll)
// does not count it.
func (m *Middleware) admit(w http.ResponseWriter, h http.Header, r *http.Request, next http.Handler, s uint32, as []applied, start time.Time, expose bool) {
	would := false
	for i := range as {
		a := &as[i]
		rc := m.ruleCounters(s, a.ru)
		switch {
		case !a.d.Allowed: // a shadow rule's refusal (decide)
			would = true
			rc.dryRunDenied.Add(1)
			m.report(r, s, a, OutcomeDryRunDenied, a.err, start)
		case a.taken:
			rc.allowed.Add(1)
			if a.shadow {
				rc.shadowAllowed.Add(1)
			}
			if m.observe != nil || a.err != nil {
				m.report(r, s, a, OutcomeAllowed, a.err, start)
			}
		}
	}
	if would {
		m.counters(s).dryRunDenied.Add(1)
	} else {
		m.counters(s).allowed.Add(1)
	}
	m.pass(w, r, next, setHeaders(h, w, as, m.upstream, expose))
}

// collect appends the rules that may apply to r: the first match, every
// match (MatchAll), or the default rule; none if nothing matched and there
// is no default.
//
// A rule on trial (Rule.DryRun or EnforcePercent below 100: it may decide
// a key in shadow) takes no request away from the rules that enforce it
// without it: after it come, as stand-ins, the next matching rules up to
// one that enforces every key (first match), and the default if no
// collected rule enforces every key. resolveKeys keeps the first stand-in
// that enforces the request's key, unless a rule before it does. Without
// this, a shadow rule on /login (or its canary's shadow cohort) left
// /login unlimited where the default limited it before. Stand-ins in
// shadow by DryRun are not collected: they could enforce no key, so a
// global DryRun decides exactly as without stand-ins.
func (m *Middleware) collect(r *http.Request, as []applied) []applied {
	mt := matcher{m: m, r: r}
	decided := false // a collected rule enforces every key
	for i := range m.rules {
		ru := &m.rules[i]
		if !mt.matches(ru) {
			continue
		}
		standIn := !m.matchAll && len(as) > 0
		if standIn && ru.cohort.shadow {
			continue
		}
		as = append(as, applied{ru: ru, standIn: standIn})
		if !ru.cohort.mayShadow() {
			decided = true
			if !m.matchAll {
				break
			}
		}
	}
	if !decided && m.def != nil && (len(as) == 0 || !m.def.cohort.shadow) {
		as = append(as, applied{ru: m.def, standIn: len(as) > 0})
	}
	return as
}

// resolveKeys runs each applied rule's key function before any backend
// call, so a request refused for its key consumes nothing, and returns
// the rules that apply: collect's, less the stand-ins not needed (a rule
// before them enforces the key) or in shadow for the key, and less the
// rules on trial whose key failed (a rule that may decide in shadow
// refuses nothing, not even for a missing key: it counts the key error
// and leaves the request to the others). It reports false when it has
// answered the request itself (FailOpen false, or no fallback key
// either, or no rule left to apply).
func (m *Middleware) resolveKeys(w http.ResponseWriter, r *http.Request, next http.Handler, s uint32, as []applied, start time.Time) ([]applied, bool) {
	fellBack := false
	enforced := false // a kept rule enforces this request's key
	n := 0            // rules kept, compacted to as[:n]
	for i := range as {
		a := &as[i]
		if a.standIn && enforced {
			break // stand-ins come last: none is needed
		}
		k, err := a.ru.key(r)
		if err != nil {
			m.ruleCounters(s, a.ru).keyErrors.Add(1)
			var fk string
			ferr := err
			if m.failOpen {
				fk, ferr = m.fallback(r)
			}
			if ferr != nil {
				m.report(r, s, a, OutcomeKeyError, err, start)
				switch {
				case a.ru.cohort.mayShadow():
					continue // dropped: a rule on trial refuses nothing; the others decide
				case !m.failOpen:
					m.counters(s).failedClosed.Add(1)
					m.onKeyErr(w, r, err)
				default:
					m.counters(s).failedOpen.Add(1)
					next.ServeHTTP(w, r)
				}
				return as, false
			}
			k = fallbackNS + fk
			fellBack = true
		}
		a.key, a.nsKey = k, k
		if a.ru.ns != "" {
			a.nsKey = a.ru.ns + k
		}
		a.shadow = a.ru.cohort.shadowFor(k)
		if a.standIn && a.shadow {
			continue // in shadow for this key: it stands in for nothing
		}
		enforced = enforced || !a.shadow
		if n != i {
			as[n] = *a
		}
		n++
	}
	if fellBack {
		m.counters(s).fallbacks.Add(1)
	}
	if n == 0 {
		// Only rules on trial applied, and none could key the request:
		// it passes as if they were not there (nothing matched).
		m.counters(s).unmatched.Add(1)
		next.ServeHTTP(w, r)
		return as, false
	}
	return as[:n], true
}

// decide asks the backends and returns the index of the refusing
// enforcing rule with the longest wait, or -1 if no enforcing rule
// refused the request (a shadow rule's refusal is left in its applied
// entry). With several rules it checks all, then takes: a refusal by one
// consumes nothing from the others. A take refused after a successful
// peek (a concurrent request got there first) stops the takes; units
// taken from the rules before it stay taken.
//
// Shadow rules (applied.shadow) refuse nothing: the enforcing rules take
// whenever none of them refused, and a shadow rule takes only while no
// rule refused or would refuse (Options.MatchAll), keeping the peek's
// decision otherwise.
func decide(ctx context.Context, as []applied) int {
	denied := -1
	would := false // some rule, shadow or not, refused
	if len(as) > 1 {
		for i := range as {
			a := &as[i]
			a.d, a.err = a.ru.peek(ctx, a.nsKey)
			if a.d.Allowed {
				continue
			}
			would = true
			if !a.shadow && (denied < 0 || a.d.RetryAfter > as[denied].d.RetryAfter) {
				denied = i
			}
		}
	}
	if denied < 0 {
		for i := range as {
			a := &as[i]
			if a.shadow && would {
				continue
			}
			a.d, a.err = a.ru.take(ctx, a.nsKey)
			a.taken = true
			if !a.d.Allowed {
				if !a.shadow {
					denied = i
					break
				}
				would = true
			}
		}
	}
	for i := range as {
		as[i].ru.timing(ctx, &as[i])
	}
	return denied
}

// pass hands the request on, through lw unless the Upstream policy is
// UpstreamUnchecked.
func (m *Middleware) pass(w http.ResponseWriter, r *http.Request, next http.Handler, lw *limitWriter) {
	if m.upstream == UpstreamUnchecked {
		next.ServeHTTP(w, r)
		return
	}
	next.ServeHTTP(lw, r)
	lw.commit() // a handler that wrote nothing: the server sends the header after us
	lw.finish()
}

// refuse answers a request an enforcing rule refused. Only the refusing
// rules count and report it (a shadow one as DryRunDenied); the others
// consumed nothing.
func (m *Middleware) refuse(w http.ResponseWriter, h http.Header, r *http.Request, s uint32, as []applied, start time.Time, denied int, expose bool) {
	for i := range as {
		a := &as[i]
		if a.d.Allowed {
			continue
		}
		rc := m.ruleCounters(s, a.ru)
		if a.shadow {
			rc.dryRunDenied.Add(1)
			m.report(r, s, a, OutcomeDryRunDenied, a.err, start)
			continue
		}
		rc.denied.Add(1)
		m.report(r, s, a, OutcomeDenied, a.err, start)
	}
	lw := setHeaders(h, w, as, m.upstream, expose)
	lw.restore()
	m.counters(s).denied.Add(1)
	d := &as[denied]
	// draft-11 section 6: Retry-After SHOULD NOT point earlier than the
	// end of any effective window the response gives: take the longest t
	// of the enforcing rules. A shadow rule's t is left out: it holds the
	// client to nothing, and counting it would make a rule on trial (a
	// new hourly limit in shadow beside an enforced per-minute one) tell
	// every client the enforced rule refuses to wait its window instead,
	// changing what the enforced refusal says.
	retry := d.reset // the refusing rule's wait, rounded up
	for i := range as {
		if as[i].t >= 0 && !as[i].shadow { // an enforcing rule at r=0 (another refusal, or a unit taken in a race)
			retry = max(retry, as[i].reset)
		}
	}
	h[hdrRetryAfter] = []string{strconv.FormatInt(retry, 10)}
	m.onDeny(w, r, Denial{Rule: d.ru.name, Key: d.key, Decision: d.d, RetryAfter: time.Duration(retry) * time.Second})
}

// report counts a backend error and calls Observe.
func (m *Middleware) report(r *http.Request, s uint32, a *applied, o Outcome, err error, start time.Time) {
	if o != OutcomeKeyError && err != nil {
		m.ruleCounters(s, a.ru).backendErrors.Add(1)
	}
	if m.observe == nil {
		return
	}
	m.observe(r, Event{Rule: a.ru.name, Outcome: o, Latency: time.Since(start), Err: err, Decision: a.d, Shadow: a.shadow})
}

// take and peek call the owned engine directly (no interface call, no
// context) or the ready backend with the request's context, so a client
// that goes away stops a remote backend's wait.
func (ru *rule) take(ctx context.Context, key string) (engine.Decision, error) {
	if ru.eng != nil {
		return ru.eng.AllowN(key, 1), nil
	}
	return ru.rl.AllowNContext(ctx, key, 1)
}

func (ru *rule) peek(ctx context.Context, key string) (engine.Decision, error) {
	if ru.eng != nil {
		return ru.eng.Peek(key), nil
	}
	return ru.rl.PeekContext(ctx, key)
}

// timing sets the RateLimit t and the X-RateLimit-Reset value of one
// applied rule. draft-11 (section 4.1.2) defines t as the effective
// window: the number of seconds within which the client can use no more
// than the available quota r. So t is given only where the middleware
// knows that time, and rounded down (a t rounded up would claim the
// fraction of a second after the quota has grown):
//
//   - Refused (r=0): until the retry can pass, exact for SlidingLog.
//     Retry-After is the same wait rounded up, so that a client honouring
//     it is never refused for retrying too early.
//   - Admitted, taking the last unit (r=0): one extra peek says when the
//     next request can pass; exact for SlidingLog, as exact as the
//     counter's own estimate for SlidingCounter.
//   - Admitted with room left (r>0): left out (t is optional). In a
//     sliding window the quota grows again as soon as the oldest counted
//     request leaves it, which can be any moment; the time until the
//     window is empty (what t said before) let a client use more than r
//     within t. No backend's Decision says when the quota next grows.
//   - RemainingUnknown and admitted: nothing (see Rule.RemainingUnknown).
//
// X-RateLimit-Reset (legacy, one value, always sent while Remaining is
// known): at r=0 the wait until the next request passes, rounded up (the
// Retry-After value); with room left the time until every request counted
// now has left the window, at most w.
func (ru *rule) timing(ctx context.Context, a *applied) {
	d := &a.d
	a.pol = ru.live.current(d)
	a.t, a.reset = -1, -1
	switch {
	case !d.Allowed:
		a.t, a.reset = floorSeconds(d.RetryAfter), max(ceilSeconds(d.RetryAfter), 1)
		return
	case ru.remUnknown:
		return
	}
	a.reset = min(ceilSeconds(d.ResetAfter), a.pol.wSec)
	if d.Remaining > 0 || !a.taken {
		return
	}
	p, err := ru.peek(ctx, a.nsKey)
	if err != nil || p.Allowed {
		// A remote backend failed, or the key was reset or freed since:
		// when the quota grows again is unknown.
		return
	}
	a.t, a.reset = floorSeconds(p.RetryAfter), max(ceilSeconds(p.RetryAfter), 1)
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
	hdrExpose     = "Access-Control-Expose-Headers"
	hdrTrailer    = "Trailer"
)

// exposeValue lets a browser script read the rate-limit headers of a
// cross-origin response (they are not CORS-safelisted).
const exposeValue = "RateLimit, RateLimit-Policy, Retry-After, X-RateLimit-Limit, X-RateLimit-Remaining, X-RateLimit-Reset"

// floorSeconds rounds d down to whole seconds; d <= 0 gives 0.
func floorSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64(d / time.Second)
}

// ceilSeconds rounds d up to whole seconds; d <= 0 gives 0. It does not
// overflow for any d (engine.Never included: d + time.Second - 1 would).
func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	s := int64(d / time.Second)
	if d%time.Second != 0 {
		s++
	}
	return s
}

func defaultKeyError(w http.ResponseWriter, _ *http.Request, _ error) {
	// The error text stays out of the response: it may name headers or
	// internals the client has no business seeing.
	http.Error(w, "400 bad request: no rate-limit key", http.StatusBadRequest)
}
