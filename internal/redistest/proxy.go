package redistest

import (
	"net"
	"sync"
	"testing"
	"time"
)

// Proxy is a TCP proxy on loopback that delays every byte by a fixed time
// in each direction, so a local server looks like a distant one: the round
// trip grows by twice the delay, and the order of bytes is kept.
type Proxy struct {
	tb     testing.TB
	ln     net.Listener
	target string

	mu    sync.Mutex
	delay time.Duration
	conns []net.Conn
	wg    sync.WaitGroup
}

// NewProxy listens on a free loopback port and forwards to target, each
// way after oneWay. It stops (closing every connection) when the test
// ends.
func NewProxy(tb testing.TB, target string, oneWay time.Duration) *Proxy {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("redistest: proxy listen: %v", err)
	}
	p := &Proxy{tb: tb, ln: ln, target: target, delay: oneWay}
	p.wg.Add(1)
	go p.accept()
	tb.Cleanup(p.close)
	return p
}

// Addr is the proxy's host:port, to give the client instead of the
// server's.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// SetDelay changes the one-way delay for bytes read from now on.
func (p *Proxy) SetDelay(oneWay time.Duration) {
	p.mu.Lock()
	p.delay = oneWay
	p.mu.Unlock()
}

func (p *Proxy) oneWay() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.delay
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return // closed
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, s)
		p.mu.Unlock()
		p.wg.Add(2)
		go p.pump(s, c)
		go p.pump(c, s)
	}
}

// chunk is bytes read at one moment, due for writing at due.
type chunk struct {
	b   []byte
	due time.Time
}

// pump copies src to dst, each read delayed by the proxy's delay: a reader
// stamps chunks, a writer sleeps until each is due. Either side closing
// closes both.
func (p *Proxy) pump(dst, src net.Conn) {
	defer p.wg.Done()
	q := make(chan chunk, 1024)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ch := range q {
			if d := time.Until(ch.due); d > 0 {
				time.Sleep(d)
			}
			if _, err := dst.Write(ch.b); err != nil {
				return
			}
		}
	}()
	buf := make([]byte, 64<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			q <- chunk{b: append([]byte(nil), buf[:n]...), due: time.Now().Add(p.oneWay())}
		}
		if err != nil {
			break
		}
	}
	close(q)
	<-done
	dst.Close()
	src.Close()
}

func (p *Proxy) close() {
	p.ln.Close()
	p.mu.Lock()
	for _, c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}
