package pprof

import (
	"errors"
	"expvar"
	"fmt"
	"net"
	"net/http"
	httppprof "net/http/pprof"
	"sync/atomic"
	"time"

	"github.com/slidelimit/slidelimit/engine"
)

// DefaultAddr is where Start listens when Options.Addr is empty.
const DefaultAddr = "127.0.0.1:6060"

// ErrNonLoopback is wrapped by Start's error for an address that is not
// loopback while Options.AllowNonLoopback is false.
var ErrNonLoopback = errors.New("debug server address is not loopback")

// StatsSource is what the debug server reads the limiter's statistics
// from; *engine.Limiter satisfies it.
type StatsSource interface{ Stats() engine.Stats }

// Options configures Start.
type Options struct {
	// Addr is host:port to listen on; "" means DefaultAddr. Port 0 picks a
	// free port (see Server.Addr).
	Addr string
	// AllowNonLoopback permits an address other than loopback (for
	// example "0.0.0.0:6060" inside a container). Off by default.
	AllowNonLoopback bool
	// Limiter, if set, is reported under /debug/limiter.
	Limiter StatsSource
}

// Server is a running debug server.
type Server struct {
	srv  *http.Server
	ln   net.Listener
	done chan struct{}
	err  error
}

// counters are the debug server's own. A debug endpoint serves a handful
// of requests a minute, so plain atomics do: striping them (xsync.Counter)
// would buy nothing here and cost a dependency.
type counters struct {
	requests *atomic.Int64
	captures *atomic.Int64 // CPU profiles and traces started
}

// Handler returns the debug endpoints on a fresh mux, for embedding in a
// caller's own debug listener. src may be nil.
func Handler(src StatsSource) http.Handler {
	c := counters{requests: new(atomic.Int64), captures: new(atomic.Int64)}
	vars := new(expvar.Map).Init()
	vars.Set("debug_server", expvar.Func(func() any {
		return map[string]int64{"requests": c.requests.Load(), "captures": c.captures.Load()}
	}))
	if src != nil {
		vars.Set("limiter", expvar.Func(func() any {
			s := src.Stats()
			return map[string]any{
				"keys": s.Keys, "max_keys": s.MaxKeys, "allowed": s.Allowed, "denied": s.Denied,
				"inserts": s.Inserts, "reclaimed": s.Reclaimed, "overflow": s.Overflow, "bytes": s.Bytes,
			}
		}))
	}
	capture := func(h http.HandlerFunc) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) { c.captures.Add(1); h(w, r) }
	}

	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", httppprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", httppprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", capture(httppprof.Profile))
	mux.HandleFunc("/debug/pprof/symbol", httppprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", capture(httppprof.Trace))
	mux.HandleFunc("/debug/trace", capture(httppprof.Trace)) // the short spelling
	mux.Handle("/debug/vars", expvar.Handler())
	mux.HandleFunc("/debug/limiter", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json; charset=utf-8")
		fmt.Fprintln(w, vars.String())
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c.requests.Add(1)
		mux.ServeHTTP(w, r)
	})
}

// Start listens on o.Addr and serves the debug endpoints in the
// background until Close.
func Start(o Options) (*Server, error) {
	addr := o.Addr
	if addr == "" {
		addr = DefaultAddr
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("pprof: address %q: %w", addr, err)
	}
	if !o.AllowNonLoopback && !isLoopbackHost(host) {
		return nil, fmt.Errorf("pprof: address %q: %w (use 127.0.0.1 or set AllowNonLoopback)", addr, ErrNonLoopback)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("pprof: listening on %q: %w", addr, err)
	}
	if tcp, ok := ln.Addr().(*net.TCPAddr); ok && !o.AllowNonLoopback && !tcp.IP.IsLoopback() {
		// "localhost" resolved to something else.
		_ = ln.Close()
		return nil, fmt.Errorf("pprof: %q bound %s: %w", addr, tcp, ErrNonLoopback)
	}
	s := &Server{
		srv: &http.Server{
			Handler: Handler(o.Limiter),
			// No WriteTimeout: profile and trace responses stream for the
			// number of seconds the client asks for.
			ReadHeaderTimeout: 10 * time.Second,
		},
		ln:   ln,
		done: make(chan struct{}),
	}
	go func() {
		defer close(s.done)
		if err := s.srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			s.err = err
		}
	}()
	return s, nil
}

func isLoopbackHost(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Addr returns the address the server listens on (with the port chosen
// when Options.Addr had port 0).
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Close stops the server at once, cutting any profile in progress, and
// returns the error that stopped serving, if any other than Close.
func (s *Server) Close() error {
	err := s.srv.Close()
	<-s.done
	if s.err != nil {
		return fmt.Errorf("pprof: serving: %w", s.err)
	}
	return err
}
