package engine

import (
	"bytes"
	"testing"
	"time"
)

// A GCRA snapshot written more than gcraMaxTime/2 (9 years) past its
// limiter's epoch restores no key, and the restored limiter keeps its own
// time: its virtual clock must then run from its own epoch, not follow
// the writer's clock piece. A writer that spent those years at a low
// limit and then went back to the Config's has a piece whose virtual
// time lags real time by years; extended back to the restorer's time near
// 0 it reads 0, and every key would drain its bucket and never refill.
func TestGCRARestoreOfAWriterPastItsTimeSpanRefillsBuckets(t *testing.T) {
	cx := &fakeClock{}
	cfg := Config{Algorithm: GCRA, Limit: 5, Window: time.Second, Shards: 4, MaxKeys: 1000, Clock: cx}
	x := newLimiter(t, cfg)
	if err := x.SetLimit(1); err != nil {
		t.Fatal(err)
	}
	cx.t.Store(gcraMaxTime/2 + int64(time.Hour))
	if err := x.SetLimit(5); err != nil {
		t.Fatal(err)
	}
	x.Allow("a")
	x.wall = func() int64 { return 1e18 }
	var buf bytes.Buffer
	if _, err := x.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	cy := &fakeClock{}
	cy.t.Store(int64(time.Minute))
	cfg.Clock = cy
	y := newLimiter(t, cfg)
	y.wall = func() int64 { return 1e18 }
	if _, err := y.ReadFrom(&buf); err != nil {
		t.Fatal(err)
	}
	if y.Len() != 0 {
		t.Fatalf("restored %d keys of a writer past GCRA's time span, want none", y.Len())
	}
	got := 0
	for range 5 {
		cy.t.Add(int64(time.Second))
		for range 10 {
			if y.Allow("b") {
				got++
			}
		}
	}
	// A fresh key: its bucket of 5 at once, then 5 a second.
	if got < 20 {
		t.Errorf("a fresh key admitted %d over 5 s at 5 per second, want 25 (its bucket refills)", got)
	}
}
