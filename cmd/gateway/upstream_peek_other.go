//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package main

// canPeek: on this system the fast path cannot check an idle connection
// for data sent unasked or for the upstream's close without a read loop,
// so it is off and every request takes http.Transport's path.
const canPeek = false

type peeker struct{}

func (pc *upstreamConn) setupPeek() {}

func (pc *upstreamConn) quiet() bool { return false }
