package engine

import (
	"strconv"
	"testing"
	"time"

	"github.com/slidelimit/slidelimit/atomiccounter"
)

// A key dated ahead of the clock (AllowAt with an early time) and then
// Reset used to keep its record for as long as it was ahead, up to the
// 4.5-minute lead, so with MaxKeys 1 a new key overflowed long after the
// Reset and a sweep. A caller's time now counts at most one Window ahead,
// and the record is reusable at most about two Windows after the Reset.
func TestResetOfFutureDatedKeyFreesWithinTwoWindows(t *testing.T) {
	for _, a := range algorithms {
		t.Run(a.String(), func(t *testing.T) {
			const W = time.Millisecond
			clk, l := startedClock(t, Config{Algorithm: a, Limit: 2, Window: W, Shards: 1, MaxKeys: 1,
				SweepInterval: time.Hour, Overflow: OverflowDeny})
			if d := l.AllowAt("early", Time(clk.Now()+int64(10*time.Minute))); !d.Allowed {
				t.Fatalf("early request denied: %+v", d)
			}
			l.Reset("early")
			clk.t.Add(int64(3 * W))
			l.Sweep()
			if d := l.AllowAt("next", Time(clk.Now())); !d.Allowed {
				t.Fatalf("new key refused 3 windows after the Reset: %+v, stats %+v", d, l.Stats())
			}
			if st := l.Stats(); st.Keys != 1 || st.Overflow != 0 {
				t.Fatalf("stats %+v, want the new key tracked", st)
			}
		})
	}
}

// A SlidingCounter Reset stored an empty word dated at its own clock
// reading, which can be behind the key's newest window (here: an early
// AllowAt into the next window). The word then went idle a window early,
// its slot was freed and reused, the new key's first word repeated one the
// old key had, and a request of the old key paused before its CAS
// succeeded into the new key (the adversarial review replayed this with a
// new key's count going from 5 to 6). Replayed here step by step: the
// paused request's CAS must fail.
func TestCounterResetDefeatsPausedCAS(t *testing.T) {
	const W = time.Second
	clk, l := startedClock(t, Config{Algorithm: SlidingCounter, Limit: 5, Window: W, Shards: 1,
		MaxKeys: 100, SweepInterval: time.Hour})
	// Put the clock 90 % into a window, and the old key's request 10 %
	// into the next one: dated one window ahead.
	base := clk.Now() - clk.Now()%int64(W) + int64(W)
	clk.t.Store(base + int64(9*W/10))
	flat := l.impl.(*counterAlgo).flat
	hA := flat.Hash("old")
	if d := l.AllowAt("old", Time(base+int64(11*W/10))); !d.Allowed {
		t.Fatalf("old key's request denied: %+v", d)
	}
	_, recA := flat.Lookup(hA)
	if recA == nil {
		t.Fatal("old key not found")
	}
	// A request of the old key loads its word, checks the hash and pauses
	// before its CAS (atomiccounter.TakeLimit's loop).
	paused := recA.State.Load()
	l.Reset("old")
	// Time passes until the Reset word is idle and the sweep frees it.
	for i := 0; l.Len() > 0; i++ {
		if i > 40 {
			t.Fatalf("Reset key never freed: %+v", l.Stats())
		}
		clk.t.Add(int64(W / 4))
		l.Sweep()
	}
	// New keys until one takes the old key's slot (a tombstone, first in
	// the probe of any key whose home bucket it is in, and reached by the
	// others once their own bucket is full).
	var hB uint64
	for i := 0; ; i++ {
		if i > 6 {
			t.Fatal("no new key reused the old key's slot")
		}
		key := "new-" + strconv.Itoa(i)
		if d := l.AllowAt(key, Time(clk.Now())); !d.Allowed {
			t.Fatalf("new key refused: %+v", d)
		}
		if _, rec := flat.Lookup(flat.Hash(key)); rec == recA {
			hB = flat.Hash(key)
			break
		}
	}
	// The paused request resumes: its CAS on the word it loaded.
	win, prev, cur := atomiccounter.Unpack(paused)
	if recA.State.CompareAndSwap(paused, atomiccounter.Pack(win, prev, cur+1)) {
		t.Fatalf("a request of the reset key wrote into the new key's state (word %#x)", paused)
	}
	if recA.Hash.Load() != hB {
		t.Fatal("slot changed hands")
	}
}

// A Reset key of SlidingCounter or GCRA used to stay in its slot until
// lazy reuse's cursor or the sweep came by: in a full shard of 40,000
// active keys a new key still overflowed 60 Windows after one was Reset.
// Its slot is now reused once its emptied state is idle (two Windows).
func TestResetKeyRoomReusedWithinTwoWindowsInLargeShard(t *testing.T) {
	for _, a := range []Algorithm{SlidingCounter, GCRA} {
		const maxKeys = 20_000
		const w = time.Second
		clk := &fakeClock{}
		l := newLimiter(t, Config{Algorithm: a, Limit: 1000, Window: w, Clock: clk, Shards: 1, MaxKeys: maxKeys,
			SweepInterval: time.Hour, Overflow: OverflowDeny})
		keys := make([]string, maxKeys)
		for i := range keys {
			keys[i] = "k" + strconv.Itoa(i)
			l.AllowAt(keys[i], Time(clk.Now()))
		}
		l.Reset(keys[maxKeys/2])
		start := clk.Now()
		got := int64(-1)
		for step := 0; step < 16*8; step++ {
			clk.t.Add(int64(w) / 16)
			for i, k := range keys {
				if i != maxKeys/2 {
					l.AllowAt(k, Time(clk.Now())) // every other key stays active
				}
			}
			if l.AllowAt("new"+strconv.Itoa(step), Time(clk.Now())).Allowed {
				got = clk.Now() - start
				break
			}
		}
		if got < 0 || got > int64(2*w+w/8) {
			t.Errorf("%v: a new key got the Reset key's room after %.2f Windows (-1: not within 8), want at most 2", a, float64(got)/float64(w))
		}
	}
}
