package gcra

import (
	"math"
	"sync/atomic"
	"testing"
)

func FuzzPackUnpack(f *testing.F) {
	f.Add(int64(0), false)
	f.Add(int64(MaxTime), true)
	f.Add(int64(-1), false)
	f.Add(int64(math.MaxInt64), true)
	f.Fuzz(func(t *testing.T, at int64, reset bool) {
		var w uint64
		if reset {
			w = PackReset(at, false)
		} else {
			w = Pack(at, false)
		}
		if !Live(w) || w == Free || w == Moved {
			t.Fatalf("packed word %#x of time %d is not live", w, at)
		}
		got, r := Unpack(w)
		if r != reset || got != min(max(at, 0), MaxTime) {
			t.Fatalf("Unpack(%#x) = %d, %v; want %d clamped, %v", w, got, r, at, reset)
		}
		// Free and Moved are never a key's word, and never idle.
		if Idle(Free, at, at, 0) || Idle(Moved, at, at, 0) || Live(Free) || Live(Moved) {
			t.Fatal("Free or Moved read as a key's word")
		}
	})
}

// Take: Burst at once from a full bucket, then one per Token; all or none.
func TestTakeBurstThenOnePerToken(t *testing.T) {
	r := Rule{Token: 10, Depth: 30} // burst 3
	var st, id atomic.Uint64
	id.Store(7)
	st.Store(First(1000, 1, r, false)) // one taken at 1000
	for i := 0; i < 2; i++ {
		if s, _ := Take(&st, &id, 7, 1000, 1, r, false, false); s != Allowed {
			t.Fatalf("request %d of the burst denied", i+2)
		}
	}
	if s, snap := Take(&st, &id, 7, 1000, 1, r, false, false); s != Denied || snap.After != 1030 {
		t.Fatalf("4th at once: %v %+v, want denied with TAT 1030", s, snap)
	}
	if s, _ := Take(&st, &id, 7, 1009, 1, r, false, false); s != Denied {
		t.Fatal("admitted before one Token passed")
	}
	if s, _ := Take(&st, &id, 7, 1010, 1, r, false, false); s != Allowed {
		t.Fatal("denied after one Token")
	}
	if s, _ := Take(&st, &id, 7, 1030, 3, r, false, false); s != Denied {
		t.Fatal("3 at once admitted with 2 free (all or none)")
	}
	if s, _ := Take(&st, &id, 8, 5000, 1, r, false, false); s != Stale {
		t.Fatal("a record of another hash was not Stale")
	}
}

// Penalty: a denied request pushes TAT on, at most two Depths past its time.
func TestTakePenaltyIsBounded(t *testing.T) {
	r := Rule{Token: 10, Depth: 30}
	var st, id atomic.Uint64
	id.Store(1)
	st.Store(Pack(1030, false))
	for i := 0; i < 100; i++ {
		Take(&st, &id, 1, 1000, 1, r, true, false)
	}
	if tat, _ := Unpack(st.Load()); tat != 1000+2*30 {
		t.Fatalf("TAT after hammering = %d, want capped at 1060", tat)
	}
	// Admitted again once the client pauses one Depth plus one Token
	// after hammering at 1000: at 1040 (TAT 1060 + Token - Depth). A probe at
	// 1039 is denied and pushes TAT to 1070, so the next admission is at
	// 1050.
	if s, _ := Take(&st, &id, 1, 1039, 1, r, true, false); s != Denied {
		t.Fatal("admitted before the pause")
	}
	if s, _ := Take(&st, &id, 1, 1049, 1, r, false, false); s != Denied {
		t.Fatal("admitted before the pushed TAT allows")
	}
	if s, _ := Take(&st, &id, 1, 1050, 1, r, true, false); s != Allowed {
		t.Fatal("denied after the pause")
	}
}

// Without a Reset a key's word only grows: every write stores a time at
// least the one it replaces. After a Reset every word carries the Reset
// history, and is idle only bound after its time, at or after every time
// the key had before (the reclamation argument rests on both).
func TestWordsOnlyGrowAndResetKeysWaitTheirBound(t *testing.T) {
	r := Rule{Token: 7, Depth: 21}
	const lead = 20                  // how far ahead of the clock a request's time may be
	bound := int64(lead) + 2*r.Depth // plus the deepest penalty
	var st, id atomic.Uint64
	id.Store(1)
	st.Store(First(100, 1, r, false))
	seed := uint64(1)
	prev, high := int64(0), int64(0)
	reset := false
	for i := 0; i < 10000; i++ {
		seed = seed*6364136223846793005 + 1442695040888963407
		clock := int64(50 + i)
		now := clock + int64(seed>>40%lead)
		switch seed >> 32 % 8 {
		case 0:
			st.Store(Emptied(st.Load(), clock))
			reset = true
		default:
			Take(&st, &id, 1, now, int64(1+seed>>20%3), r, seed>>10%2 == 0, false)
		}
		w := st.Load()
		at, mark := Unpack(w)
		if !reset && at < prev {
			t.Fatalf("step %d: word of a never Reset key went back from %d to %d", i, prev, at)
		}
		if WasReset(w) != reset || mark && !reset {
			t.Fatalf("step %d: word %#x, Reset history %v", i, w, reset)
		}
		if high = max(high, at); ReadyAt(w, bound) < high {
			t.Fatalf("step %d: word %#x ready at %d, before the key's time %d", i, w, ReadyAt(w, bound), high)
		}
		prev = at
	}
}

// A Reset forgets the debt: the bucket is full at the mark.
func TestResetMarkIsAFullBucket(t *testing.T) {
	r := Rule{Token: 10, Depth: 30}
	var st, id atomic.Uint64
	id.Store(1)
	st.Store(Pack(5000, false)) // deep in debt at 1000
	st.Store(Emptied(st.Load(), 1000))
	for i := 0; i < 3; i++ {
		if s, _ := Take(&st, &id, 1, 1000, 1, r, false, false); s != Allowed {
			t.Fatalf("request %d of a full bucket after Reset denied", i+1)
		}
	}
	if s, _ := Take(&st, &id, 1, 1000, 1, r, false, false); s != Denied {
		t.Fatal("4th at once admitted after Reset")
	}
	if s, _ := Take(&st, &id, 1, 1000, 1, r, false, true); s != Other {
		t.Fatal("a request on the other clock was not told Other")
	}
	w := st.Load()
	c := Convert(w, func(t int64) int64 { return t * 2 })
	if !Alt(c) || !WasReset(c) || Alt(Convert(c, func(t int64) int64 { return t })) {
		t.Fatalf("Convert(%#x) = %#x: clock or history lost", w, c)
	}
}

func TestMulDivSaturates(t *testing.T) {
	if got := MulDiv(math.MaxInt64, math.MaxInt64, 1, false); got != MaxTime {
		t.Fatalf("MulDiv overflow = %d, want MaxTime", got)
	}
	if got := MulDiv(10, 3, 4, true); got != 8 {
		t.Fatalf("ceil(30/4) = %d", got)
	}
	if got := MulDiv(10, 3, 4, false); got != 7 {
		t.Fatalf("floor(30/4) = %d", got)
	}
}
