package loadgen

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"syscall"
	"time"

	"github.com/slidelimit/slidelimit/engine"
)

// target is what a sender calls once per request. do is called
// concurrently by all senders; it reports whether the request was admitted,
// or an error when it got no decision.
type target interface {
	do(key string) (allowed bool, err error)
}

// inProcess calls the engine directly: the latency measured is the
// limiter's decision plus the generator's own scheduling.
type inProcess struct{ l *engine.Limiter }

func (t inProcess) do(key string) (bool, error) { return t.l.Allow(key), nil }

// httpTarget sends GET url with the key in a header over keep-alive
// loopback connections, one idle connection per sender.
type httpTarget struct {
	client *http.Client
	url    string
	header string
}

// errStatus is wrapped for an answer that is neither 2xx nor 429.
var errStatus = errors.New("unexpected HTTP status")

func newHTTPTarget(c Config) *httpTarget {
	dialer := &net.Dialer{
		Timeout: c.HTTPTimeout,
		// The URL was checked for a loopback host; this checks the address
		// actually dialled, so "localhost" resolving elsewhere is refused.
		Control: func(network, address string, _ syscall.RawConn) error {
			host, _, err := net.SplitHostPort(address)
			if err != nil {
				return err
			}
			if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
				return fmt.Errorf("loadgen: refusing to dial %s: %w", address, ErrNonLoopback)
			}
			return nil
		},
	}
	tr := &http.Transport{
		DialContext:         dialer.DialContext,
		MaxIdleConns:        c.Concurrency,
		MaxIdleConnsPerHost: c.Concurrency,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
	}
	return &httpTarget{
		client: &http.Client{
			Transport: tr,
			Timeout:   c.HTTPTimeout,
			// A redirect is an answer, not something to follow.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
		url:    c.URL,
		header: c.KeyHeader,
	}
}

func (t *httpTarget) do(key string) (bool, error) {
	req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, t.url, nil)
	if err != nil {
		return false, fmt.Errorf("loadgen: building request: %w", err)
	}
	req.Header.Set(t.header, key)
	resp, err := t.client.Do(req)
	if err != nil {
		return false, err
	}
	// Drain the body so the connection goes back to the idle pool.
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusTooManyRequests:
		return false, nil
	case resp.StatusCode >= 200 && resp.StatusCode < 300:
		return true, nil
	}
	return false, fmt.Errorf("loadgen: %s: %w %d", t.url, errStatus, resp.StatusCode)
}

func (t *httpTarget) close() { t.client.CloseIdleConnections() }
