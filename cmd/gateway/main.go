package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/httplimit"
	"github.com/slidelimit/slidelimit/pprof"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "gateway:", err)
		}
		os.Exit(2)
	}
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

// run is the gateway; it returns when ctx is done (after a graceful
// shutdown) or on a start-up error.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	opts, err := loadConfig(f.config)
	if err != nil {
		return err
	}

	target := f.upstream
	if f.upstream == "builtin" {
		up, err := startBuiltinUpstream()
		if err != nil {
			return err
		}
		defer up.Close()
		target = "http://" + up.Addr().String()
	}
	u, err := parseUpstream(target)
	if err != nil {
		return fmt.Errorf("-upstream: %w", err)
	}

	mw, err := httplimit.New(opts)
	if err != nil {
		return fmt.Errorf("config %s: %w", f.config, err)
	}
	defer mw.Close()

	if f.pprof != "" {
		dbg, err := pprof.Start(pprof.Options{Addr: f.pprof, Limiter: engineStats{mw}})
		if err != nil {
			return fmt.Errorf("-pprof: %w", err)
		}
		defer dbg.Close()
		fmt.Fprintf(stdout, "gateway: debug endpoints on http://%s/debug/pprof/\n", dbg.Addr())
	}

	ln, err := net.Listen("tcp", f.listen)
	if err != nil {
		return fmt.Errorf("-listen: %w", err)
	}
	srv := &http.Server{
		Handler:           mw.Handler(newProxy(u)),
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	fmt.Fprintf(stdout, "gateway: listening on http://%s, upstream %s\n", ln.Addr(), u)

	select {
	case err := <-served:
		return fmt.Errorf("serving: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), f.shutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serving: %w", err)
	}
	if err := mw.Close(); err != nil {
		return fmt.Errorf("closing limiters: %w", err)
	}
	s := mw.Stats()
	fmt.Fprintf(stdout, "gateway: stopped; allowed %d, denied %d, dry-run denied %d, key errors %d (failed open %d, closed %d), unmatched %d\n",
		s.Allowed, s.Denied, s.DryRunDenied, s.KeyErrors, s.FailedOpen, s.FailedClosed, s.Unmatched)
	return nil
}

// engineStats adapts the middleware's summed engine statistics to the
// debug server's StatsSource.
type engineStats struct{ m *httplimit.Middleware }

func (e engineStats) Stats() engine.Stats { return e.m.EngineStats() }

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

func newProxy(u *url.URL) *httputil.ReverseProxy {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	// A gateway keeps many idle connections to its one upstream; the
	// default of 2 per host would open and close a connection for most
	// requests under load and exhaust loopback ports.
	tr.MaxIdleConns = 1024
	tr.MaxIdleConnsPerHost = 1024
	return &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(u)
			// Rewrite drops the inbound X-Forwarded-For; keep the chain
			// and append this hop's peer, as proxies in front of
			// trusting services must.
			pr.Out.Header["X-Forwarded-For"] = pr.In.Header["X-Forwarded-For"]
			pr.SetXForwarded()
		},
		Transport: tr,
	}
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
