//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package main

import "syscall"

// canPeek: the fast path can check an idle connection before reusing it.
const canPeek = true

// peeker looks at an idle connection's socket without blocking and
// without taking anything from it.
type peeker struct {
	raw syscall.RawConn
	fn  func(fd uintptr) bool // made once per connection: a closure per check would allocate
	buf [1]byte
	n   int
	err error
}

func (pc *upstreamConn) setupPeek() {
	sc, ok := pc.conn.(syscall.Conn)
	if !ok {
		return
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return
	}
	pk := &pc.peek
	pk.raw = raw
	pk.fn = func(fd uintptr) bool {
		pk.n, _, pk.err = syscall.Recvfrom(int(fd), pk.buf[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		return true // never wait for readiness: the answer is wanted now
	}
}

// quiet reports whether the idle connection is still open and has
// nothing to read. Data waiting on an idle connection was sent unasked
// (a second response, trailing bytes of the last one: the upstream is out
// of step with this side), and reading it as the next request's response
// would hand one client an answer meant for nobody; a read of 0 bytes is
// the upstream's close. Either way the connection is not reused. This
// is the one system call the fast path adds per reused connection;
// Transport learns the same from its read loop, always blocked in a read.
func (pc *upstreamConn) quiet() bool {
	pk := &pc.peek
	if pk.raw == nil {
		return false
	}
	if err := pk.raw.Read(pk.fn); err != nil {
		return false
	}
	// Nothing to read (EAGAIN; EWOULDBLOCK where it differs) is the one
	// answer of a healthy idle connection.
	return pk.err == syscall.EAGAIN || pk.err == syscall.EWOULDBLOCK
}
