package main

import (
	"bufio"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/redis/go-redis/v9"

	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/httplimit"
	"github.com/slidelimit/slidelimit/promlimit"
	"github.com/slidelimit/slidelimit/redisstore"
)

// gateway serves requests with the current configuration generation and
// replaces it on reload.
//
// Reload protocol. A request acquires the generation it starts with and
// holds it to its end, so a reload never changes the limiter, proxy or
// timeouts under a request in flight. acquire increments the generation's
// reference count and then checks that it is still current; if a reload
// swapped it in between, the request lets go and takes the new one. A
// retired generation is therefore drained once its count is seen at zero
// after the swap: a late acquirer always sees the swap and backs off.
// Resources (limiters, Redis clients) are shared between generations when
// their fingerprints match and counted per generation holding them; the
// last generation to drain closes them.
type gateway struct {
	upstream *url.URL
	server   serverConfig // the server section the listener was built with (read at start only)
	log      *slog.Logger
	metrics  *metrics

	cur atomic.Pointer[generation]

	mu        sync.Mutex // serializes reloads and guards resources' users
	resources map[string]*resource
	retiring  sync.WaitGroup

	inflight inflight
	abandon  atomic.Bool     // set when shutdown gave up on requests in flight: close must not wait for them
	overload *overload       // the watcher and protective state (nil: none, as in tests that build a gateway alone)
	state    *stateKeeper    // rate_limiting.state_file (nil: none)
	total    httplimit.Stats // of released generations; guarded by mu
}

// generation is one loaded configuration, ready to serve.
type generation struct {
	cfg       *config
	mw        *httplimit.Middleware
	proxy     *proxy
	handler   http.Handler
	names     []string    // rule names, for the metrics
	resources []*resource // backends first, then the Redis clients they use
	engines   []ruleEngine
	stores    []promlimit.Store  // backend: redis rules, for the metrics
	redisNums []ruleNumbers      // backend: redis and hybrid rules' numbers, to say on reload whether their counts carry over
	hybrids   []promlimit.Hybrid // backend: hybrid rules
	budget    *resource          // the key budget, if any
	refs      atomic.Int64
	denials   atomic.Uint64 // for deny sampling
}

// resource is a limiter backend or a Redis client, kept across reloads
// while its fingerprint is unchanged.
type resource struct {
	fp     string
	rl     engine.RateLimiter
	eng    *engine.Limiter // memory backends, for stats
	client *redis.Client
	kb     *httplimit.KeyBudget
	// verified is the current configuration's tier keys, read by a kept
	// KeyBudget's Verified function.
	verified atomic.Pointer[map[string]string]
	close    func() error
	users    int // generations holding it; guarded by gateway.mu
}

func newGateway(u *url.URL, log *slog.Logger, m *metrics) *gateway {
	return &gateway{upstream: u, log: log, metrics: m, resources: map[string]*resource{}}
}

// load builds a generation from c and makes it current. On error nothing
// changes: resources built for the failed generation are closed, the
// current one keeps serving.
func (g *gateway) load(c *config) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	gen, fresh, err := g.build(c)
	if err != nil {
		if cur := g.cur.Load(); cur != nil {
			g.metrics.retain(cur.names) // build made series for the failed config's rules
		}
		for _, r := range fresh {
			if g.resources[r.fp] == r {
				delete(g.resources, r.fp)
			}
			_ = r.close()
		}
		return err
	}
	if gen.budget != nil {
		// An older generation sharing the budget sees the new tier
		// keys from now on; that only exempts keys the operator has
		// just declared genuine.
		gen.budget.verified.Store(&c.budget.verified)
	}
	for _, r := range gen.resources {
		r.users++
		g.resources[r.fp] = r
	}
	old := g.cur.Swap(gen)
	g.metrics.retain(gen.names)
	if old != nil {
		g.retiring.Add(1)
		go func() {
			defer g.retiring.Done()
			g.retire(old)
		}()
	}
	return nil
}

// build makes a generation, reusing the current resources whose
// fingerprints match. fresh lists the resources it created (to close if
// the generation is abandoned). Caller holds g.mu.
func (g *gateway) build(c *config) (gen *generation, fresh []*resource, err error) {
	gen = &generation{cfg: c}
	opts := c.opts
	rules := append([]httplimit.Rule(nil), opts.Rules...)
	var def, pre *httplimit.Rule
	if opts.Default != nil {
		d := *opts.Default
		def = &d
	}
	if opts.Preflight != nil {
		p := *opts.Preflight
		pre = &p
	}
	// The rules in c.backends order: opts.Rules, then Default, then Preflight.
	targets := make([]*httplimit.Rule, 0, len(rules)+2)
	for i := range rules {
		targets = append(targets, &rules[i])
	}
	for _, r := range []*httplimit.Rule{def, pre} {
		if r != nil {
			targets = append(targets, r)
		}
	}
	var clients []*resource
	seen := map[*resource]bool{}
	take := func(r *resource, isNew bool) {
		if isNew {
			fresh = append(fresh, r)
		}
		if !seen[r] {
			seen[r] = true
			if r.client != nil {
				clients = append(clients, r)
			} else {
				gen.resources = append(gen.resources, r)
			}
		}
	}
	var changes []numbersChange
	for i, bs := range c.backends {
		ru := targets[i]
		r, isNew, err := g.backend(bs, ru.Engine, take, &changes)
		if err != nil {
			return nil, fresh, err
		}
		take(r, isNew)
		switch b := r.rl.(type) {
		case *engine.Limiter:
			gen.engines = append(gen.engines, ruleEngine{Rule: ru.Name, Limiter: b})
		case *redisstore.Store:
			gen.stores = append(gen.stores, promlimit.Store{Rule: ru.Name, Store: b})
		case *redisstore.Hybrid:
			gen.hybrids = append(gen.hybrids, promlimit.Hybrid{Rule: ru.Name, Hybrid: b})
		}
		if bs.kind != "memory" {
			gen.redisNums = append(gen.redisNums, redisNumbers(ru.Name, ru.Engine))
		}
		ru.Limiter, ru.Limit, ru.Window, ru.Engine = r.rl, ru.Engine.Limit, ru.Engine.Window, engine.Config{}
	}
	if b := c.budget; b != nil {
		r, ok := g.resources[b.fp]
		if !ok {
			r = &resource{fp: b.fp}
			cfg := b.cfg
			cfg.Verified = func(k string) bool {
				m := r.verified.Load()
				if m == nil {
					return false
				}
				_, ok := (*m)[k]
				return ok
			}
			kb, err := httplimit.NewKeyBudget(cfg)
			if err != nil {
				// The numbers were checked against the YAML; only the
				// memory bound (it depends on the shard count) is left to
				// building the trackers.
				return nil, fresh, fmt.Errorf("rate_limiting.key_budget.memory_limit_mb: %w: %w", err, errConfig)
			}
			r.kb, r.rl, r.close = kb, nil, kb.Close
		}
		take(r, !ok)
		b.ref.kb = r.kb
		gen.budget = r
	}
	gen.resources = append(gen.resources, clients...)
	opts.Rules, opts.Default, opts.Preflight = rules, def, pre
	names := make([]string, 0, len(targets))
	for _, r := range targets {
		names = append(names, r.Name)
	}
	gen.names = names
	rm := g.metrics.forRules(names)
	denySample := uint64(c.log.denySample)
	log := g.log
	opts.Observe = func(r *http.Request, e httplimit.Event) {
		m := rm[e.Rule]
		if m == nil {
			return // cannot happen: every rule's name is in rm
		}
		m.Observe(e)
		if e.Err != nil && e.Outcome != httplimit.OutcomeKeyError {
			if n, ok := m.errLog.tick(time.Now()); ok {
				log.Warn("rate-limit backend failed; its on_failure policy answered", "rule", e.Rule,
					"err", e.Err.Error(), "allowed", e.Decision.Allowed, "failures_since_last_line", n)
			}
		}
		if (e.Outcome == httplimit.OutcomeDenied || e.Outcome == httplimit.OutcomeDryRunDenied) && denySample > 0 &&
			gen.denials.Add(1)%denySample == 1%denySample {
			log.Info("denied", "rule", e.Rule, "outcome", e.Outcome.String(), "method", r.Method, "path", r.URL.Path,
				"remote", r.RemoteAddr, "retry_after", e.Decision.RetryAfter.String(), "sampled_one_in", denySample)
		}
	}
	// The kept limiters take their new numbers before the middleware
	// reads them; a failure from here on puts the old ones back.
	cur := g.cur.Load()
	undo := func(applied []numbersChange) {
		for i := len(applied) - 1; i >= 0; i-- {
			c := applied[i]
			if err := c.apply(cur, c.oldLimit, c.oldBurst); err != nil {
				g.log.Error("restoring a rule's numbers after a failed reload", "rule", c.rule, "err", err.Error())
			}
		}
	}
	for i := range changes {
		if err := changes[i].apply(cur, changes[i].limit, changes[i].burst); err != nil {
			undo(changes[:i+1])
			return nil, fresh, err
		}
	}
	gen.mw, err = httplimit.New(opts)
	if err != nil {
		undo(changes)
		return nil, fresh, fmt.Errorf("rate_limiting: %w", err)
	}
	for _, c := range changes {
		g.log.Info("rule's numbers changed on reload; its counts are kept", "rule", c.rule,
			"max_requests", c.limit, "was", c.oldLimit, "burst", c.burst, "burst_was", c.oldBurst)
	}
	gen.proxy = newProxy(g.upstream, c, g.log, g.metrics)
	gen.handler = g.overload.handler(c, gen.mw.Handler(gen.proxy))
	return gen, fresh, nil
}

// backend returns the resource for bs: the current one with the same
// fingerprint, or a new one.
func (g *gateway) backend(bs backendSpec, ec engine.Config, take func(*resource, bool), changes *[]numbersChange) (*resource, bool, error) {
	rebuilt := false
	if r, ok := g.resources[bs.fp]; ok && r.eng != nil {
		c, kept := g.retune(bs, r)
		if kept {
			if c != nil {
				*changes = append(*changes, *c)
			}
			return r, false, nil
		}
		// Above the limiter's MaxLimit (retune logged it): rebuilt
		// below, from empty state.
		rebuilt = true
	} else if ok {
		if bs.redis != nil {
			// Hold the client too, so the generation that keeps this
			// backend keeps its connection open.
			take(g.resources[clientFP(bs.redis)], false)
		}
		return r, false, nil
	}
	switch bs.kind {
	case "memory":
		l, err := engine.New(ec)
		if err != nil {
			return nil, false, engineFieldErr(bs.field, err)
		}
		if cur := g.cur.Load(); cur != nil && !rebuilt {
			for _, re := range cur.engines {
				if re.Rule == bs.rule {
					g.log.Info("rule rebuilt on reload: its algorithm, window, key or engine settings changed; its counts start afresh (a change of max_requests up to max_limit, or of burst, keeps them)",
						"rule", bs.rule, "field", bs.field)
				}
			}
		}
		return &resource{fp: bs.fp, rl: l, eng: l, close: l.Close}, true, nil
	}
	cfp := clientFP(bs.redis)
	cr, ok := g.resources[cfp]
	isNewClient := !ok
	if !ok {
		client := redis.NewClient(&redis.Options{
			Addr: bs.redis.addr, DB: bs.redis.db,
			// What redisstore.Config.Client requires: the store's
			// per-call timeout bounds socket reads and writes (no
			// socket timeout of the client's own, which could fire
			// first), and no retries (a retried script may run twice).
			ContextTimeoutEnabled: true, ReadTimeout: -1, WriteTimeout: -1, MaxRetries: -1,
		})
		cr = &resource{fp: cfp, client: client, close: client.Close}
		g.resources[cfp] = cr // found by later rules of this build; removed if the build fails
	}
	take(cr, isNewClient)
	rc := redisstore.Config{
		Client: cr.client, Algorithm: ec.Algorithm, Limit: ec.Limit, Burst: ec.Burst, Window: ec.Window, Penalty: ec.Penalty,
		Prefix: bs.redis.prefix, Timeout: bs.redis.timeout, OnFailure: bs.redis.onFailure, Nodes: bs.redis.nodes,
		AllowEviction: bs.redis.allowEviction,
	}
	g.logRedisRebuilt(bs, ec)
	if bs.kind == "redis" {
		s, err := redisstore.New(rc)
		if err != nil {
			return nil, false, fmt.Errorf("%s: %w: %w", bs.field, err, errConfig)
		}
		if err := s.EvictionCheck(); err != nil {
			g.log.Warn("could not check the Redis eviction policy; nothing but the operator guards against evicted limiter keys (each grants its whole limit again)",
				"rule", bs.rule, "field", bs.field, "err", err.Error())
		}
		return &resource{fp: bs.fp, rl: s, close: s.Close}, true, nil
	}
	h, err := redisstore.NewHybrid(redisstore.HybridConfig{Config: rc, SyncInterval: bs.sync, MaxLease: bs.lease})
	if err != nil {
		return nil, false, fmt.Errorf("%s: %w: %w", bs.field, err, errConfig)
	}
	if h.Stats().Store.EvictionUnchecked {
		g.log.Warn("could not check the Redis eviction policy; nothing but the operator guards against evicted limiter keys (each grants its whole limit again)",
			"rule", bs.rule, "field", bs.field)
	}
	return &resource{fp: bs.fp, rl: h, close: h.Close}, true, nil
}

// ruleNumbers are the numbers a Redis rule's key names carry.
type ruleNumbers struct {
	rule         string
	alg          engine.Algorithm
	limit, burst int // burst: GCRA's bucket (the limit when not set); 0 for the others
	window       time.Duration
}

func redisNumbers(rule string, ec engine.Config) ruleNumbers {
	n := ruleNumbers{rule: rule, alg: ec.Algorithm, limit: ec.Limit, window: ec.Window}
	if n.alg == 0 {
		n.alg = engine.DefaultAlgorithm
	}
	if n.alg == engine.GCRA {
		n.burst = ec.Burst
		if n.burst == 0 {
			n.burst = ec.Limit
		}
	}
	return n
}

// logRedisRebuilt says when a reload builds a new Redis or hybrid backend
// for a rule that had one under other numbers: its counts live in Redis
// under key names that carry the algorithm, window, limit and (GCRA)
// burst, so the new store finds none of them and the rule starts afresh
// (the old keys expire by their TTL). A new store under the same numbers
// (a new address, timeout or on_failure) finds the old counts: nothing to
// say then.
func (g *gateway) logRedisRebuilt(bs backendSpec, ec engine.Config) {
	cur := g.cur.Load()
	if cur == nil {
		return
	}
	now := redisNumbers(bs.rule, ec)
	for _, was := range cur.redisNums {
		if was.rule == bs.rule && was != now {
			g.log.Info("rule rebuilt on reload: redis key names carry the numbers: counts start afresh",
				"rule", bs.rule, "field", bs.field, "algorithm", now.alg.String(), "was_algorithm", was.alg.String(),
				"max_requests", now.limit, "was", was.limit, "burst", now.burst, "burst_was", was.burst,
				"window", now.window.String(), "window_was", was.window.String())
		}
	}
}

func clientFP(rc *redisConfig) string { return fmt.Sprintf("redis-client %s db=%d", rc.addr, rc.db) }

// engineFieldErr names the YAML field an engine error is about; only the
// memory bound (it depends on the shard count) and GCRA's largest bucket
// (burst x window / max_limit) are checked by the engine alone, the rest
// was validated against the YAML already.
func engineFieldErr(field string, err error) error {
	if errors.Is(err, engine.ErrInvalidConfig) {
		if strings.Contains(err.Error(), "Config.Burst") {
			return fmt.Errorf("%s.burst: %w: %w", field, err, errConfig)
		}
		return fmt.Errorf("rate_limiting.sliding_window.memory_limit_mb (used by %s): %w: %w", field, err, errConfig)
	}
	return fmt.Errorf("%s: %w", field, err)
}

// acquire returns the current generation with a reference held; release
// it when the request ends. It returns nil when none is current (after
// close).
func (g *gateway) acquire() *generation {
	for {
		gen := g.cur.Load()
		if gen == nil {
			return nil
		}
		gen.refs.Add(1)
		if g.cur.Load() == gen {
			return gen
		}
		gen.refs.Add(-1) // swapped meanwhile: its retirement may be waiting for zero
	}
}

// drainPoll is how often a retiring generation checks for requests still
// holding it. Retirement is off the request path; a coarse poll is enough.
const drainPoll = 50 * time.Millisecond

// retire waits until no request holds gen, then releases its resources.
func (g *gateway) retire(gen *generation) {
	for gen.refs.Load() != 0 {
		time.Sleep(drainPoll)
	}
	g.release(gen)
}

// release drops gen's hold on its resources and closes those no current
// or draining generation holds any more.
func (g *gateway) release(gen *generation) {
	gen.proxy.tr.CloseIdleConnections()
	var closing []*resource
	g.mu.Lock()
	g.total = addStats(g.total, gen.mw.Stats())
	for _, r := range gen.resources {
		r.users--
		if r.users == 0 {
			if g.resources[r.fp] == r { // a rebuilt limiter may hold the fingerprint now
				delete(g.resources, r.fp)
			}
			closing = append(closing, r)
		}
	}
	g.mu.Unlock()
	errs := []error{gen.mw.Close()}
	for _, r := range closing { // backends before the clients they use
		errs = append(errs, r.close())
	}
	if err := errors.Join(errs...); err != nil {
		g.log.Error("closing a retired configuration", "err", err.Error())
	}
}

// close releases the current generation and waits for retiring ones;
// call it when no request is in flight.
func (g *gateway) close() {
	if g.abandon.Load() {
		return
	}
	g.retiring.Wait()
	g.mu.Lock()
	gen := g.cur.Swap(nil)
	g.mu.Unlock()
	if gen != nil {
		g.release(gen)
	}
}

func (g *gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if lc := requestConn(r); lc != nil {
		if lc.beginRequest(r) {
			w.Header().Set("Connection", "close")
		}
		defer lc.endRequest()
		if r.Header.Get("Upgrade") != "" {
			w = &upgradeWatch{ResponseWriter: w, lc: lc}
		}
	}
	if hasControl(r.URL.Path) {
		// A NUL or control character (%00, %09, %0d%0a once decoded) is
		// in no route; servers cut the path at it or strip it, and so
		// would route it where no rule looked.
		http.Error(w, "400 bad request: control character in the path", http.StatusBadRequest)
		return
	}
	if !validHost(r.Host) {
		// net/http checks a Host header, but a request line in absolute
		// form ("GET http://a\";for=1.2.3.4/ HTTP/1.1") sets r.Host from
		// the URL unchecked, and the host goes on in X-Forwarded-Host.
		http.Error(w, "400 bad request: malformed host", http.StatusBadRequest)
		return
	}
	if !utf8.ValidString(r.URL.Path) {
		// Invalid UTF-8 (an overlong "%c0%af" for "/", a stray Latin-1
		// byte) is read differently by every decoder behind the gateway:
		// old ones take overlong forms for the ASCII they encode.
		http.Error(w, "400 bad request: the path is not UTF-8", http.StatusBadRequest)
		return
	}
	done := g.inflight.add(r)
	defer done()
	gen := g.acquire()
	if gen == nil {
		// No configuration is in force: before the first load, or after
		// close released the last one (a request that reached the handler
		// as the server stopped). There are no rules to decide it by.
		w.Header().Set("Connection", "close")
		http.Error(w, "503 service unavailable: the gateway is shutting down", http.StatusServiceUnavailable)
		return
	}
	defer gen.refs.Add(-1)
	if !gen.cfg.log.access {
		gen.handler.ServeHTTP(w, r)
		return
	}
	start := time.Now()
	sw := &statusWriter{ResponseWriter: w}
	gen.handler.ServeHTTP(sw, r)
	code := sw.code
	if code == 0 {
		code = http.StatusOK
	}
	g.log.Info("access", "method", r.Method, "path", r.URL.Path, "remote", r.RemoteAddr, "status", code,
		"bytes", sw.bytes, "duration", time.Since(start).String())
}

// hasControl reports whether p holds an ASCII control character (NUL
// included) or DEL.
func hasControl(p string) bool {
	for i := 0; i < len(p); i++ {
		if p[i] < ' ' || p[i] == 0x7f {
			return true
		}
	}
	return false
}

// statusWriter records the status and body size for the access log.
// Unwrap lets http.ResponseController (which ReverseProxy uses to flush
// and to hijack upgraded connections) reach the underlying writer.
type statusWriter struct {
	http.ResponseWriter
	code  int
	bytes int64
}

func (w *statusWriter) WriteHeader(code int) {
	if w.code == 0 && code >= 200 {
		w.code = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(p []byte) (int, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	n, err := w.ResponseWriter.Write(p)
	w.bytes += int64(n)
	return n, err
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Hijack records an upgraded connection as 101: ReverseProxy writes the
// upstream's 101 straight to the hijacked connection, not via WriteHeader.
func (w *statusWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	c, brw, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err == nil && w.code == 0 {
		w.code = http.StatusSwitchingProtocols
	}
	return c, brw, err
}

// engineStats sums engine.Stats over the current generation's in-memory
// limiters, for the debug server's /debug/limiter.
type engineStats struct{ g *gateway }

func (e engineStats) Stats() engine.Stats {
	var s engine.Stats
	gen := e.g.cur.Load()
	if gen == nil {
		return s
	}
	// A retired generation may close its engines while this sums; Stats
	// on a closed engine.Limiter reads counters only, which stay valid.
	for _, re := range gen.engines {
		o := re.Limiter.Stats()
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

// stats sums the middleware counters over every generation so far.
func (g *gateway) stats() httplimit.Stats {
	g.mu.Lock()
	defer g.mu.Unlock()
	s := g.total
	if gen := g.cur.Load(); gen != nil {
		s = addStats(s, gen.mw.Stats())
	}
	return s
}

func addStats(a, b httplimit.Stats) httplimit.Stats {
	a.Allowed += b.Allowed
	a.Denied += b.Denied
	a.DryRunDenied += b.DryRunDenied
	a.KeyErrors += b.KeyErrors
	a.FailedOpen += b.FailedOpen
	a.FailedClosed += b.FailedClosed
	a.Unmatched += b.Unmatched
	return a
}

// currentEngines lists the running configuration's in-memory limiters, for
// the metrics.
func (g *gateway) currentEngines() []ruleEngine {
	if gen := g.cur.Load(); gen != nil {
		return gen.engines
	}
	return nil
}

// numbersChange is a kept limiter's limit and burst before and after a
// reload: build applies it before the new generation's middleware reads
// the limiter, and undoes it if the build fails.
type numbersChange struct {
	rule               string
	eng                *engine.Limiter
	limit, burst       int // the new numbers (burst: GCRA only, 0 to leave)
	oldLimit, oldBurst int
	field              string
}

// retune says whether the memory limiter r can be kept for bs: its
// fingerprint matched, so only the limit or the burst can differ, and
// SetLimit takes any limit up to the limiter's MaxLimit (fixed at New).
// It returns the change to apply, nil when the numbers are the same.
func (g *gateway) retune(bs backendSpec, r *resource) (*numbersChange, bool) {
	cfg := r.eng.Config()
	if bs.limit > cfg.MaxLimit {
		g.log.Info("rule rebuilt on reload: max_requests is above the limiter's max_limit; its counts start afresh (set max_limit for headroom)",
			"rule", bs.rule, "field", bs.field, "max_requests", bs.limit, "max_limit", cfg.MaxLimit)
		return nil, false
	}
	burst, oldBurst := 0, 0 // GCRA only: the others' burst is their limit
	if cfg.Algorithm == engine.GCRA {
		burst, oldBurst = bs.burst, cfg.Burst
		if burst == 0 {
			burst = bs.limit
		}
	}
	if bs.limit == cfg.Limit && burst == oldBurst {
		return nil, true
	}
	return &numbersChange{rule: bs.rule, eng: r.eng, limit: bs.limit, burst: burst, oldLimit: cfg.Limit, oldBurst: oldBurst, field: bs.field}, true
}

// apply sets c's numbers through the current generation's middleware when
// it has the rule on this limiter (so the responses it still serves
// advertise them too), else on the limiter itself.
func (c *numbersChange) apply(cur *generation, limit, burst int) error {
	setLimit, setBurst := c.eng.SetLimit, c.eng.SetBurst
	if cur != nil && cur.holds(c.rule, c.eng) {
		setLimit = func(n int) error { return cur.mw.SetLimit(c.rule, n) }
		setBurst = func(n int) error { return cur.mw.SetBurst(c.rule, n) }
	}
	if err := setLimit(limit); err != nil {
		return fmt.Errorf("%s.max_requests: %w: %w", c.field, err, errConfig)
	}
	// With the default burst SetLimit moved the bucket too; set it where
	// it still differs.
	if burst != 0 && c.eng.Config().Burst != burst {
		if err := setBurst(burst); err != nil {
			return fmt.Errorf("%s.burst: %w: %w", c.field, err, errConfig)
		}
	}
	return nil
}

// holds reports whether gen's rule named name decides on l.
func (gen *generation) holds(name string, l *engine.Limiter) bool {
	for _, re := range gen.engines {
		if re.Rule == name && re.Limiter == l {
			return true
		}
	}
	return false
}

// currentStores and currentHybrids list the running configuration's Redis
// backends, for the metrics.
func (g *gateway) currentStores() []promlimit.Store {
	if gen := g.cur.Load(); gen != nil {
		return gen.stores
	}
	return nil
}

func (g *gateway) currentHybrids() []promlimit.Hybrid {
	if gen := g.cur.Load(); gen != nil {
		return gen.hybrids
	}
	return nil
}

// validHost reports whether h holds only the bytes net/http accepts in a
// Host header (golang.org/x/net/http/httpguts.ValidHostHeader's set: an
// RFC 3986 host, port and IPv6 literal, plus the sub-delims), so an
// absolute-form request line cannot carry more than a Host header could.
func validHost(h string) bool {
	for i := 0; i < len(h); i++ {
		c := h[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case strings.IndexByte("!$%&'()*+,-.:;=[]_~", c) >= 0:
		default:
			return false
		}
	}
	return true
}
