package pprof

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/slidelimit/slidelimit/engine"
)

func startTest(t *testing.T) (*Server, *engine.Limiter) {
	t.Helper()
	l, err := engine.New(engine.Config{Algorithm: engine.SlidingLog, Limit: 2, Window: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	s, err := Start(Options{Addr: "127.0.0.1:0", Limiter: l})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s, l
}

func get(t *testing.T, url string) []byte {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: status %d: %s", url, resp.StatusCode, body)
	}
	return body
}

func TestIndexListsProfiles(t *testing.T) {
	s, _ := startTest(t)
	body := string(get(t, "http://"+s.Addr()+"/debug/pprof/"))
	for _, p := range []string{"goroutine", "heap", "allocs", "profile", "trace"} {
		if !strings.Contains(body, p) {
			t.Errorf("index does not list %q", p)
		}
	}
	heap := get(t, "http://"+s.Addr()+"/debug/pprof/heap")
	if len(heap) == 0 {
		t.Error("empty heap profile")
	}
}

func TestTraceCapture(t *testing.T) {
	s, _ := startTest(t)
	for _, path := range []string{"/debug/pprof/trace?seconds=0.2", "/debug/trace?seconds=0.2"} {
		body := get(t, "http://"+s.Addr()+path)
		// A runtime/trace file starts with "go 1.NN trace".
		if !strings.HasPrefix(string(body), "go 1.") || !strings.Contains(string(body[:16]), "trace") {
			n := min(len(body), 16)
			t.Errorf("%s: not a runtime trace: %q", path, body[:n])
		}
	}
}

func TestLimiterStatsJSON(t *testing.T) {
	s, l := startTest(t)
	for range 3 {
		l.Allow("k") // limit 2: two admitted, one denied
	}
	l.Allow("other")
	var v struct {
		Limiter struct {
			Keys    int    `json:"keys"`
			Allowed uint64 `json:"allowed"`
			Denied  uint64 `json:"denied"`
		} `json:"limiter"`
		Debug struct {
			Requests int64 `json:"requests"`
		} `json:"debug_server"`
	}
	body := get(t, "http://"+s.Addr()+"/debug/limiter")
	if err := json.Unmarshal(body, &v); err != nil {
		t.Fatalf("%v in %s", err, body)
	}
	if v.Limiter.Keys != 2 || v.Limiter.Allowed != 3 || v.Limiter.Denied != 1 {
		t.Errorf("limiter stats = %+v, want keys 2, allowed 3, denied 1", v.Limiter)
	}
	if v.Debug.Requests != 1 {
		t.Errorf("debug_server.requests = %d, want 1 (this request)", v.Debug.Requests)
	}
}

func TestRejectsNonLoopback(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:0", ":0", "[::]:0", "192.0.2.1:0", "example.com:0"} {
		s, err := Start(Options{Addr: addr})
		if !errors.Is(err, ErrNonLoopback) {
			if s != nil {
				s.Close()
			}
			t.Errorf("Start(%q) = %v, want ErrNonLoopback", addr, err)
		}
	}
	if _, err := Start(Options{Addr: "127.0.0.1"}); err == nil || errors.Is(err, ErrNonLoopback) {
		t.Errorf("Start without a port = %v, want an address error", err)
	}
}

func TestNotOnDefaultServeMux(t *testing.T) {
	s, _ := startTest(t)
	resp, err := http.Get("http://" + s.Addr() + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("GET / = %d, want 404", resp.StatusCode)
	}
}
