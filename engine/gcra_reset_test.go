package engine

import (
	"strconv"
	"testing"
	"time"

	"github.com/slidelimit/slidelimit/gcra"
)

// Reset forgets a key's debt: after it the key behaves as a new key
// (Burst at once, then one per Window/Limit). Before, Reset marked the
// bucket full only from the end of the debt: a key hammered in Penalty mode
// at 1 per hour was admitted once after Reset with ResetAfter 3h, then
// denied an hour later with RetryAfter 2h.
func TestGCRAResetForgetsTheDebt(t *testing.T) {
	for _, penalty := range []bool{false, true} {
		clk := &fakeClock{}
		clk.t.Store(1e12)
		l := newLimiter(t, Config{Algorithm: GCRA, Limit: 1, Window: time.Hour, Penalty: penalty, Clock: clk})
		for i := 0; i < 100; i++ {
			l.Allow("k")
		}
		l.Reset("k")
		if d := l.AllowN("k", 1); !d.Allowed || d.ResetAfter != time.Hour || d.Remaining != 0 {
			t.Fatalf("penalty=%v: first request after Reset: %+v, want admitted, full again in 1h", penalty, d)
		}
		if d := l.Peek("k"); d.Allowed || d.RetryAfter != time.Hour {
			t.Fatalf("penalty=%v: Peek of a second at once: %+v, want denied for 1h", penalty, d)
		}
		clk.t.Add(int64(time.Hour))
		if d := l.AllowN("k", 1); !d.Allowed {
			t.Fatalf("penalty=%v: one hour later: %+v, want admitted", penalty, d)
		}
		// Peek agrees: a Reset key with nothing taken since is full.
		l.Reset("k")
		if d := l.Peek("k"); !d.Allowed || d.Remaining != 1 || d.ResetAfter != 0 {
			t.Fatalf("penalty=%v: Peek after Reset: %+v, want a full bucket", penalty, d)
		}
	}
}

// A Reset mark is earlier than words the key had before it, so a request
// paused before its CAS could hold a word later than the mark. The record
// is freed only once the clock has passed every such word (a Reset key's
// words wait a bound: the callers' lead plus the deepest bucket), so the
// key that takes the record next starts above all of them and the paused
// CAS fails. (Replayed with the old key's words a Window ahead and deep in
// Penalty debt.)
func TestGCRAResetKeyRecordReusedOnlyAfterItsOldWords(t *testing.T) {
	const W = time.Second
	clk, l := startedClock(t, Config{Algorithm: GCRA, Limit: 5, Window: W, Penalty: true, Shards: 1, MaxKeys: 100, SweepInterval: time.Hour})
	flat := l.impl.(*gcraAlgo).flat
	for i := 0; i < 50; i++ { // a Window ahead, and pushed two buckets on
		l.AllowNAt("old", 1, Time(clk.Now()+int64(W)))
	}
	_, recA := flat.Lookup(flat.Hash("old"))
	paused := recA.State.Load()
	pausedAt, _ := gcra.Unpack(paused)
	l.Reset("old")
	if d := l.AllowN("old", 5); !d.Allowed {
		t.Fatalf("after Reset the bucket is not full: %+v", d)
	}
	for i := 0; l.Len() > 0; i++ {
		if i > 80 {
			t.Fatalf("Reset key never freed: %+v", l.Stats())
		}
		clk.t.Add(int64(W / 8))
		l.Sweep()
	}
	for i := 0; ; i++ {
		if i > 6 {
			t.Fatal("no new key reused the old key's slot")
		}
		key := "new-" + strconv.Itoa(i)
		if d := l.AllowAt(key, Time(clk.Now())); !d.Allowed {
			t.Fatalf("new key refused: %+v", d)
		}
		if _, rec := flat.Lookup(flat.Hash(key)); rec == recA {
			break
		}
	}
	// The new key's words only grow from its first: above the paused one.
	if at, _ := gcra.Unpack(recA.State.Load()); at <= pausedAt || gcra.WasReset(recA.State.Load()) {
		t.Fatalf("new key's first word at %d, not above the Reset key's paused word at %d", at, pausedAt)
	}
}
