package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/slidelimit/slidelimit/cmd/gateway/internal/hupsig"
)

// Exit statuses (documented in doc.go and the README).
const (
	exitOK        = 0 // stopped by SIGTERM/SIGINT, every request finished
	exitFailure   = 1 // serving failed after start (listener died, limiters failed to close)
	exitBadConfig = 2 // bad flags or configuration at start; nothing was served
	exitDropped   = 3 // stopped, but the shutdown timeout cut requests in flight (each logged)
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

type flags struct {
	config, listen, upstream, pprof string
	shutdownTimeout                 time.Duration
}

func parseFlags(args []string, stderr io.Writer) (flags, error) {
	var f flags
	fs := flag.NewFlagSet("gateway", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&f.config, "config", "", "YAML config file (required; see cmd/gateway/gateway.example.yaml)")
	fs.StringVar(&f.listen, "listen", "127.0.0.1:8080", "address to serve on (port 0: a free port, printed at start)")
	fs.StringVar(&f.upstream, "upstream", "", `upstream base URL (http or https), or "builtin" for a trivial in-process upstream on loopback`)
	fs.StringVar(&f.pprof, "pprof", "", "serve pprof, trace and limiter stats on this loopback address, e.g. 127.0.0.1:6060")
	fs.DurationVar(&f.shutdownTimeout, "shutdown-timeout", 10*time.Second, "how long requests in flight may finish after SIGTERM")
	if err := fs.Parse(args); err != nil {
		return f, err
	}
	if fs.NArg() > 0 {
		return f, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if f.config == "" {
		return f, errors.New("-config is required")
	}
	if f.upstream == "" {
		return f, errors.New(`-upstream is required (a URL, or "builtin")`)
	}
	if f.shutdownTimeout <= 0 {
		return f, fmt.Errorf("-shutdown-timeout must be > 0, got %v", f.shutdownTimeout)
	}
	return f, nil
}

// errDropped says a shutdown ran out of time and cut requests.
var errDropped = errors.New("shutdown timed out with requests in flight")

// run is the gateway; it returns its exit status when ctx is done (after
// a graceful shutdown) or on a start-up error. SIGHUP reloads the
// configuration while it runs.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	f, err := parseFlags(args, stderr)
	if err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(stderr, "gateway:", err)
		}
		return exitBadConfig
	}
	// SIGHUP has been caught since package hupsig's initialization (its
	// default action would kill the process with 129 during start-up);
	// one that arrived since is handled once serving begins.
	hup := hupsig.C

	log := slog.New(slog.NewJSONHandler(stderr, nil))
	g, srv, ln, closeAll, err := start(f, stdout, log)
	if err != nil {
		fmt.Fprintln(stderr, "gateway:", err)
		return exitBadConfig
	}
	defer closeAll()

	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	fmt.Fprintf(stdout, "gateway: listening on http://%s, upstream %s\n", ln.Addr(), g.upstream)
	for {
		select {
		case err := <-served:
			log.Error("serving failed", "err", err.Error())
			return exitFailure
		case <-hup:
			g.reload(f.config, srv)
			continue
		case <-ctx.Done():
		}
		break
	}
	err = shutdown(srv, served, g, f.shutdownTimeout, log)
	s := g.stats()
	fmt.Fprintf(stdout, "gateway: stopped; allowed %d, denied %d, dry-run denied %d, key errors %d (failed open %d, closed %d), unmatched %d\n",
		s.Allowed, s.Denied, s.DryRunDenied, s.KeyErrors, s.FailedOpen, s.FailedClosed, s.Unmatched)
	switch {
	case errors.Is(err, errDropped):
		return exitDropped
	case err != nil:
		log.Error("stopping", "err", err.Error())
		return exitFailure
	}
	return exitOK
}

// start loads the configuration and builds everything the gateway serves
// with; closeAll undoes it.
func start(f flags, stdout io.Writer, log *slog.Logger) (g *gateway, srv *http.Server, ln net.Listener, closeAll func(), err error) {
	var closers []func()
	cleanup := func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}
	defer func() {
		if err != nil {
			cleanup()
		}
	}()
	c, err := loadConfig(f.config)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	target := f.upstream
	if f.upstream == "builtin" {
		up, err := startBuiltinUpstream()
		if err != nil {
			return nil, nil, nil, nil, err
		}
		closers = append(closers, up.Close)
		target = "http://" + up.Addr().String()
		// make run-http measures the upstream directly too.
		fmt.Fprintf(stdout, "gateway: builtin upstream on %s\n", target)
	}
	u, err := parseUpstream(target)
	if err != nil {
		return nil, nil, nil, nil, fmt.Errorf("-upstream: %w", err)
	}
	g = newGateway(u, log, nil)
	g.server = c.server
	g.metrics = newMetrics(func() float64 { return float64(g.inflight.count()) }, g)
	g.overload = newOverload(g, log, g.metrics.reg) // before load: each generation's handler sheds through it
	if err := g.load(c); err != nil {
		return nil, nil, nil, nil, fmt.Errorf("config %s: %w", f.config, err)
	}
	closers = append(closers, g.close)
	// Restored before the listener serves: a limiter takes its state only
	// while it has decided nothing. And before the overload sampler
	// starts: it reads every limiter's Stats, and no call may run on a
	// limiter during its ReadFrom.
	if g.state, err = startState(c.state, g, log); err != nil {
		return nil, nil, nil, nil, err
	}
	closers = append(closers, g.state.close)
	g.overload.start()
	closers = append(closers, g.overload.close)
	if f.pprof != "" {
		adm, err := startAdmin(f.pprof, g)
		if err != nil {
			return nil, nil, nil, nil, fmt.Errorf("-pprof: %w", err)
		}
		closers = append(closers, adm.close)
		fmt.Fprintf(stdout, "gateway: debug endpoints on http://%s/debug/pprof/, metrics on http://%s/metrics\n", adm.addr(), adm.addr())
	}
	ln, err = net.Listen("tcp", f.listen)
	if err != nil {
		return nil, nil, nil, nil, fmt.Errorf("-listen: %w", err)
	}
	ln = newConnLimitListener(ln, c.server.connBounds(), g.trustedPeer,
		func(reason string) { g.metrics.connsRefused.WithLabelValues(reason).Inc() },
		func(pool string) { g.metrics.connsEvicted.WithLabelValues(pool).Inc() })
	return g, newServer(g, c.server, log), ln, cleanup, nil
}

// newServer is the client-facing server of g with the server section's
// settings.
func newServer(g *gateway, sc serverConfig, log *slog.Logger) *http.Server {
	return &http.Server{
		Handler:           g,
		ReadHeaderTimeout: sc.readHeaderTimeout,
		IdleTimeout:       sc.idleTimeout,
		// net/http reads up to MaxHeaderBytes + 4096 bytes (its bufio
		// slack) of request line and header before it answers 431 and
		// closes the connection; the slack is taken off so that
		// max_header_bytes is what a connection can make the gateway
		// hold. Each header line and value is kept as read until the
		// request is complete, so this is the bound per connection.
		MaxHeaderBytes: int(sc.maxHeaderBytes) - 4096,
		ErrorLog:       slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		// The handler reports each request's start and end to the
		// connection it came on (header counting, eviction order).
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			if lc, ok := c.(*limitedConn); ok {
				return context.WithValue(ctx, connCtxKey{}, lc)
			}
			return ctx
		},
	}
}

// trustedPeer reports whether a is in the running configuration's
// trusted_proxies (such a peer carries many clients' connections).
func (g *gateway) trustedPeer(a netip.Addr) bool {
	gen := g.cur.Load()
	return gen != nil && isTrusted(a, gen.cfg.trusted)
}

// reload loads path and swaps it in; a file that does not load or build
// leaves the running configuration in place, and the log says why.
func (g *gateway) reload(path string, srv *http.Server) {
	c, err := loadConfig(path)
	if err == nil {
		err = g.load(c)
	}
	if err != nil {
		g.metrics.reloads.WithLabelValues("error").Inc()
		g.log.Error("reload failed; the previous configuration keeps serving", "config", path, "err", err.Error())
		return
	}
	g.metrics.reloads.WithLabelValues("ok").Inc()
	g.log.Info("configuration reloaded", "config", path, "rules", len(c.opts.Rules))
	if c.server != g.server {
		g.log.Warn("server.* settings change only at restart; the listener keeps its timeouts and bounds",
			"read_header_timeout", srv.ReadHeaderTimeout.String(), "idle_timeout", srv.IdleTimeout.String(),
			"max_header_bytes", g.server.maxHeaderBytes, "max_header_fields", g.server.maxHeaderFields,
			"max_connections", g.server.maxConns, "max_trusted_connections", g.server.maxTrustedConns,
			"max_connections_per_ip", g.server.maxConnsPerIP)
	}
}

// shutdown stops accepting, waits up to timeout for requests in flight,
// and past it logs each request it cuts and returns errDropped.
func shutdown(srv *http.Server, served <-chan error, g *gateway, timeout time.Duration, log *slog.Logger) error {
	sctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	err := srv.Shutdown(sctx)
	if err == nil {
		if err := <-served; !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("serving: %w", err)
		}
		// Shutdown does not wait for hijacked connections (websockets
		// and other upgrades proxied through): their handlers are still
		// in flight. Give them the rest of the timeout.
		err = waitIdle(sctx, &g.inflight)
		if err == nil {
			g.state.final() // nothing is being decided: the last snapshot is exact
			g.close()
			return nil
		}
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("shutdown: %w", err)
	}
	dropped := g.inflight.snapshot()
	now := time.Now()
	for _, r := range dropped {
		log.Warn("shutdown timeout: dropping request in flight", "method", r.method, "path", r.path,
			"remote", r.remote, "running_for", now.Sub(r.start).Round(time.Millisecond).String())
	}
	log.Error("shutdown timed out; cutting the requests still in flight", "timeout", timeout.String(), "dropped", len(dropped))
	_ = srv.Close()
	select {
	case <-served:
	default: // already received above, when Shutdown itself finished
	}
	// Handlers may still be running (a hijacked websocket is not closed
	// by srv.Close); the limiters stay open under them, and close does
	// not wait for them: the process is about to exit. They were decided
	// when they started, so the snapshot still counts them.
	g.state.final()
	g.abandon.Store(true)
	return fmt.Errorf("%w: %d dropped after %v", errDropped, len(dropped), timeout)
}

// waitIdle waits until no request is in flight or ctx ends.
func waitIdle(ctx context.Context, f *inflight) error {
	t := time.NewTicker(drainPoll)
	defer t.Stop()
	for f.count() > 0 {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
	return nil
}

func parseUpstream(s string) (*url.URL, error) {
	u, err := url.Parse(s)
	if err != nil {
		return nil, err
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("%q: scheme must be http or https", s)
	}
	if u.Host == "" {
		return nil, fmt.Errorf("%q: no host", s)
	}
	return u, nil
}

// startBuiltinUpstream serves 200 "ok" on a free loopback port, so the
// gateway can be tried (and load-tested) without a real backend.
func startBuiltinUpstream() (*builtinUpstream, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("builtin upstream: %w", err)
	}
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			_, _ = io.WriteString(w, "ok\n")
		}),
		ReadHeaderTimeout: 10 * time.Second,
	}
	b := &builtinUpstream{srv: srv, ln: ln, done: make(chan struct{})}
	go func() {
		defer close(b.done)
		_ = srv.Serve(ln) // returns ErrServerClosed at Close
	}()
	return b, nil
}

type builtinUpstream struct {
	srv  *http.Server
	ln   net.Listener
	done chan struct{}
}

func (b *builtinUpstream) Addr() net.Addr { return b.ln.Addr() }

func (b *builtinUpstream) Close() {
	_ = b.srv.Close()
	<-b.done
}
