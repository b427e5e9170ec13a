package grpclimit

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/slidelimit/slidelimit/engine"
	"google.golang.org/protobuf/types/known/anypb"
)

// Rule is one rate-limit policy and the calls it applies to.
type Rule struct {
	// Name identifies the policy in the RateLimit metadata and namespaces
	// the rule's keys. 1 to 64 bytes of [A-Za-z0-9_.-], unique per
	// Limiter.
	Name string
	// Methods are the calls the rule takes: a full method
	// ("/pkg.Service/Method") or every method of a service
	// ("/pkg.Service/*"). Empty matches every call. Ignored on
	// Options.Default.
	Methods []string
	// Limiter decides: an *engine.Limiter, a redisstore.Store or Hybrid,
	// possibly shared with other rules (keys are prefixed with Name and a
	// NUL byte, so rules never share state). Required.
	Limiter engine.RateLimiter
	// Limit and Window describe Limiter's policy: they are what the
	// ratelimit-policy metadata advertises. Required.
	Limit  int
	Window time.Duration
	// Cost is the number of units one call takes, 1..Limit; 0 means 1.
	Cost int
	// Key names the client for this rule; nil means Options.Key.
	Key KeyFunc
}

// BackendPolicy says what a call gets when its rule's backend returns an
// error that is not the call's own context ending (Redis down or slow).
type BackendPolicy uint8

const (
	// BackendDecides uses the Decision the backend returned with its
	// error: its own failure policy (redisstore.Config.Fail: open, closed
	// or a local engine) decides. The default.
	BackendDecides BackendPolicy = iota
	// BackendFailOpen passes the call on, without rate-limit metadata.
	BackendFailOpen
	// BackendFailClosed refuses the call with codes.Unavailable.
	BackendFailClosed
)

// Outcome is what a rule did with a call, as Options.Observe sees it.
type Outcome uint8

const (
	OutcomeAllowed       Outcome = iota // passed on
	OutcomeDenied                       // refused with codes.ResourceExhausted
	OutcomeKeyError                     // key function failed; refused, or passed unlimited (FailOpen)
	OutcomeCanceled                     // the call's context ended while the backend decided
	OutcomeBackendClosed                // backend failed; refused with codes.Unavailable (BackendFailClosed)
)

var outcomeNames = [...]string{"allowed", "denied", "key_error", "canceled", "backend_closed"}

func (o Outcome) String() string {
	if int(o) < len(outcomeNames) {
		return outcomeNames[o]
	}
	return "outcome(" + strconv.Itoa(int(o)) + ")"
}

// Event is one decided call, passed to Options.Observe.
type Event struct {
	Rule       string // the rule's name
	FullMethod string
	Outcome    Outcome
	// Err is the key function's error with OutcomeKeyError; with any
	// other outcome a non-nil Err is the backend's error, and Decision is
	// what its failure policy answered.
	Err      error
	Decision engine.Decision
}

// Options configures a Limiter.
type Options struct {
	// Rules are tried in order; the first whose Methods match decides.
	Rules []Rule
	// Default decides calls no rule matched. Nil passes them unlimited.
	Default *Rule
	// Key names the client for rules without their own Key. Nil means
	// PeerIP with its defaults (IPv4 /32, IPv6 /64). Client-side limiters
	// have no peer: give them Method, Constant or a KeyFunc of their own.
	Key KeyFunc
	// FailOpen keys a call whose key function failed by FallbackKey
	// instead (namespaced apart from the rule's own keys), so a call
	// without an API key is limited per peer rather than refused; only if
	// FallbackKey fails too is the call passed on unlimited. False refuses
	// it with codes.InvalidArgument: the call lacks what the policy keys
	// on, and retrying it unchanged cannot help, so ResourceExhausted would
	// mislead.
	FailOpen bool
	// FallbackKey keys calls whose key failed, with FailOpen. Nil means
	// PeerIP with its defaults.
	FallbackKey KeyFunc
	// Backend says what a call gets when a backend fails (BackendDecides
	// by default). A call whose own context ended gets that context's
	// status (codes.Canceled or codes.DeadlineExceeded) whatever this says.
	Backend BackendPolicy
	// Observe, if set, is called once per decided call, synchronously,
	// before the call is passed on or refused: feed metrics or a sampled
	// log from it, and keep it fast.
	Observe func(ctx context.Context, e Event)
}

// Limiter decides gRPC calls by its rules and hands out interceptors.
// It is safe for concurrent use.
type Limiter struct {
	rules    []*rule
	def      *rule
	failOpen bool
	fallback KeyFunc
	backend  BackendPolicy
	observe  func(context.Context, Event)
}

type rule struct {
	name       string
	all        bool
	exact      map[string]struct{} // full methods
	services   []string            // "/pkg.Service/" prefixes
	lim        engine.RateLimiter
	limit      int
	window     time.Duration
	wSec       int64
	cost       int
	key        KeyFunc
	peer       *peerKeyer // key's keyer when key is the default PeerIP, else nil
	prefix     string     // name + NUL: the rule's own keys
	fbPrefix   string     // name + 0x01: FallbackKey's keys, apart from any own key
	policy     string     // ratelimit-policy item: "name";q=100;w=60
	policyVals []string   // {policy}, the metadata value list
	rlPrefix   string     // ratelimit item up to r's value: "name";r=
	limitStr   string
	denyMsg    string     // a refusal's message, up to the wait
	quotaAny   *anypb.Any // the QuotaFailure detail of every refusal
}

// New checks opts and builds a Limiter. Invalid options are an error
// wrapping ErrInvalidOptions that names the field.
func New(opts Options) (*Limiter, error) {
	l := &Limiter{failOpen: opts.FailOpen, fallback: opts.FallbackKey, backend: opts.Backend, observe: opts.Observe}
	if opts.Backend > BackendFailClosed {
		return nil, fmt.Errorf("grpclimit: Options.Backend %d is not a BackendPolicy: %w", opts.Backend, ErrInvalidOptions)
	}
	key := opts.Key
	var defPeer *peerKeyer // the default key, nil when Options.Key is set
	if key == nil || (l.failOpen && l.fallback == nil) {
		pk, err := newPeerKeyer(IPConfig{})
		if err != nil {
			return nil, err
		}
		if key == nil {
			key, defPeer = pk.key, pk
		}
		if l.fallback == nil {
			l.fallback = pk.key
		}
	}
	names := map[string]bool{}
	for i := range opts.Rules {
		ru, err := newRule(&opts.Rules[i], key, defPeer, fmt.Sprintf("Options.Rules[%d]", i), false)
		if err != nil {
			return nil, err
		}
		if names[ru.name] {
			return nil, fmt.Errorf("grpclimit: Options.Rules[%d].Name %q is used twice: %w", i, ru.name, ErrInvalidOptions)
		}
		names[ru.name] = true
		l.rules = append(l.rules, ru)
	}
	if opts.Default != nil {
		ru, err := newRule(opts.Default, key, defPeer, "Options.Default", true)
		if err != nil {
			return nil, err
		}
		if names[ru.name] {
			return nil, fmt.Errorf("grpclimit: Options.Default.Name %q is a rule's name too: %w", ru.name, ErrInvalidOptions)
		}
		l.def = ru
	}
	return l, nil
}

func newRule(r *Rule, key KeyFunc, defPeer *peerKeyer, field string, isDefault bool) (*rule, error) {
	if len(r.Name) == 0 || len(r.Name) > 64 || strings.IndexFunc(r.Name, func(c rune) bool {
		return !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '-')
	}) >= 0 {
		return nil, fmt.Errorf("grpclimit: %s.Name %q must be 1 to 64 bytes of [A-Za-z0-9_.-]: %w", field, r.Name, ErrInvalidOptions)
	}
	if r.Limiter == nil {
		return nil, fmt.Errorf("grpclimit: %s.Limiter is required: %w", field, ErrInvalidOptions)
	}
	if r.Limit < 1 {
		return nil, fmt.Errorf("grpclimit: %s.Limit must be at least 1, got %d: %w", field, r.Limit, ErrInvalidOptions)
	}
	if r.Window <= 0 {
		return nil, fmt.Errorf("grpclimit: %s.Window must be positive, got %s: %w", field, r.Window, ErrInvalidOptions)
	}
	cost := r.Cost
	if cost == 0 {
		cost = 1
	}
	if cost < 1 || cost > r.Limit {
		return nil, fmt.Errorf("grpclimit: %s.Cost must be in [1, Limit=%d], got %d: %w", field, r.Limit, r.Cost, ErrInvalidOptions)
	}
	ru := &rule{
		name: r.Name, lim: r.Limiter, limit: r.Limit, window: r.Window, cost: cost, key: r.Key,
		prefix: r.Name + "\x00", fbPrefix: r.Name + "\x01",
		wSec:     ceilSeconds(r.Window),
		limitStr: strconv.Itoa(r.Limit),
	}
	if ru.key == nil {
		ru.key, ru.peer = key, defPeer
	}
	ru.policy = `"` + r.Name + `";q=` + ru.limitStr + ";w=" + strconv.FormatInt(ru.wSec, 10)
	ru.policyVals = []string{ru.policy}
	ru.denyMsg = fmt.Sprintf("rate limit %q exceeded (%d per %s): retry in ", ru.name, ru.limit, ru.window)
	ru.quotaAny = quotaFailure(ru)
	ru.rlPrefix = `"` + r.Name + `";r=`
	ru.all = isDefault || len(r.Methods) == 0
	if !ru.all {
		ru.exact = map[string]struct{}{}
		for j, m := range r.Methods {
			svc, rest, ok := strings.Cut(strings.TrimPrefix(m, "/"), "/")
			if !strings.HasPrefix(m, "/") || !ok || svc == "" || rest == "" || strings.Contains(rest, "/") ||
				(strings.Contains(rest, "*") && rest != "*") {
				return nil, fmt.Errorf("grpclimit: %s.Methods[%d] %q is neither \"/pkg.Service/Method\" nor \"/pkg.Service/*\": %w", field, j, m, ErrInvalidOptions)
			}
			if rest == "*" {
				ru.services = append(ru.services, m[:len(m)-1])
			} else {
				ru.exact[m] = struct{}{}
			}
		}
	}
	return ru, nil
}

func (ru *rule) matches(fullMethod string) bool {
	if ru.all {
		return true
	}
	if _, ok := ru.exact[fullMethod]; ok {
		return true
	}
	for _, s := range ru.services {
		if strings.HasPrefix(fullMethod, s) && strings.IndexByte(fullMethod[len(s):], '/') < 0 {
			return true
		}
	}
	return false
}

func (l *Limiter) match(fullMethod string) *rule {
	for _, ru := range l.rules {
		if ru.matches(fullMethod) {
			return ru
		}
	}
	return l.def
}

// verdict is one call's decision.
type verdict struct {
	ru      *rule // nil: no rule applies, pass unlimited
	pass    bool  // pass the call on
	err     error // the status error to refuse with (pass false)
	d       engine.Decision
	headers bool  // the decision is the policy's: send the rate-limit metadata
	t       int64 // draft-11 t in seconds, -1 to leave it out
}

// decide runs the matching rule for one call.
func (l *Limiter) decide(ctx context.Context, fullMethod string) verdict {
	ru := l.match(fullMethod)
	if ru == nil {
		return verdict{pass: true}
	}
	v := verdict{ru: ru, t: -1}
	var nsKey string
	var kerr error
	if ru.peer != nil {
		// The default key: prefix and address in one allocation.
		var buf [128]byte // a name of 64 bytes, NUL, an IPv6 address of 39
		b, err := ru.peer.appendKey(append(buf[:0], ru.prefix...), ctx)
		if kerr = err; kerr == nil {
			nsKey = string(b)
		}
	} else {
		k, err := ru.key(ctx, fullMethod)
		if kerr = err; kerr == nil {
			nsKey = ru.prefix + k
		}
	}
	if kerr != nil {
		if !l.failOpen {
			l.report(ctx, ru, fullMethod, OutcomeKeyError, kerr, engine.Decision{})
			v.err = keyErrorStatus(kerr)
			return v
		}
		fk, ferr := l.fallback(ctx, fullMethod)
		if ferr != nil {
			l.report(ctx, ru, fullMethod, OutcomeKeyError, kerr, engine.Decision{})
			v.pass = true
			return v
		}
		nsKey = ru.fbPrefix + fk
	}
	d, err := ru.lim.AllowNContext(ctx, nsKey, ru.cost)
	v.d = d
	if err != nil {
		if cerr := ctx.Err(); cerr != nil {
			l.report(ctx, ru, fullMethod, OutcomeCanceled, err, d)
			v.err = contextStatus(cerr)
			return v
		}
		switch l.backend {
		case BackendFailOpen:
			l.report(ctx, ru, fullMethod, OutcomeAllowed, err, d)
			v.pass = true
			return v
		case BackendFailClosed:
			l.report(ctx, ru, fullMethod, OutcomeBackendClosed, err, d)
			v.err = unavailableStatus(ru.name)
			return v
		}
	}
	v.headers = true
	if d.Allowed {
		// A call keyed by FallbackKey is reported with the fallback
		// decision's outcome, as httplimit reports it.
		l.report(ctx, ru, fullMethod, OutcomeAllowed, err, d)
		v.pass = true
		if d.Remaining <= 0 {
			// The call took the last unit: draft-11's t (the effective
			// window of r=0) is the wait until the next call passes, which
			// only a peek tells. A failed peek, or a key freed meanwhile,
			// leaves t out.
			if p, perr := ru.lim.PeekContext(ctx, nsKey); perr == nil && !p.Allowed {
				v.t = floorSeconds(p.RetryAfter)
			}
		}
		return v
	}
	l.report(ctx, ru, fullMethod, OutcomeDenied, err, d)
	if !d.Admissible() {
		// The backend can never admit this call's cost (its limit is
		// below it: a lower engine limit than Rule.Limit, a SetLimit,
		// GCRA's bucket): no wait helps, so nothing invites a retry.
		v.err = neverStatus(ru, d)
		return v
	}
	v.t = floorSeconds(d.RetryAfter)
	v.err = deniedStatus(ru, d)
	return v
}

func (l *Limiter) report(ctx context.Context, ru *rule, fullMethod string, o Outcome, err error, d engine.Decision) {
	if l.observe != nil {
		l.observe(ctx, Event{Rule: ru.name, FullMethod: fullMethod, Outcome: o, Err: err, Decision: d})
	}
}

func floorSeconds(d time.Duration) int64 { return max(int64(d/time.Second), 0) }

// ceilSeconds rounds d up to whole seconds; it does not overflow for any
// d (d + time.Second - 1 would near engine.Never).
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
