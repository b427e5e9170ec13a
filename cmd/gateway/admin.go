package main

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/slidelimit/slidelimit/pprof"
)

// admin is the loopback-only listener of -pprof: package pprof's debug
// endpoints plus /metrics.
type admin struct {
	srv  *http.Server
	ln   net.Listener
	done chan struct{}
}

var errNotLoopback = errors.New("not a loopback address (the admin endpoints expose profiles and internals)")

func startAdmin(addr string, g *gateway) (*admin, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("address %q: %w", addr, err)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return nil, fmt.Errorf("%q: %w", addr, errNotLoopback)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	if tcp, ok := ln.Addr().(*net.TCPAddr); !ok || !tcp.IP.IsLoopback() {
		_ = ln.Close()
		return nil, fmt.Errorf("%q bound %s: %w", addr, ln.Addr(), errNotLoopback)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", g.metrics.handler())
	mux.Handle("/", pprof.Handler(engineStats{g}))
	a := &admin{
		// No WriteTimeout: profiles and traces stream for as long as
		// they were asked to.
		srv:  &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second},
		ln:   ln,
		done: make(chan struct{}),
	}
	go func() {
		defer close(a.done)
		_ = a.srv.Serve(ln) // ErrServerClosed at close
	}()
	return a, nil
}

func (a *admin) addr() net.Addr { return a.ln.Addr() }

func (a *admin) close() {
	_ = a.srv.Close()
	<-a.done
}
