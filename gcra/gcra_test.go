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
		if Idle(Free, at, at) || Idle(Moved, at, at) || Live(Free) || Live(Moved) {
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

// A word only grows: every write, Reset's included, stores a time at
// least the one it replaces (the reclamation argument rests on it).
func TestWordsOnlyGrow(t *testing.T) {
	r := Rule{Token: 7, Depth: 21}
	var st, id atomic.Uint64
	id.Store(1)
	st.Store(First(100, 1, r, false))
	seed := uint64(1)
	prev := int64(0)
	for i := 0; i < 10000; i++ {
		seed = seed*6364136223846793005 + 1442695040888963407
		now := int64(50 + seed>>40%400)
		switch seed >> 32 % 4 {
		case 0:
			w := st.Load()
			st.Store(Emptied(w, now))
		default:
			Take(&st, &id, 1, now, int64(1+seed>>20%3), r, seed>>10%2 == 0, false)
		}
		at, _ := Unpack(st.Load())
		if at < prev {
			t.Fatalf("step %d: word went back from %d to %d", i, prev, at)
		}
		prev = at
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
