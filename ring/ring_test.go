package ring

import (
	"slices"
	"sync"
	"sync/atomic"
	"testing"
)

func TestPackRoundTrip(t *testing.T) {
	for _, c := range [][3]uint32{{0, 0, 0}, {1<<32 - 1, 65534, 65535}, {12345, 7, 3}} {
		l, n, b := Unpack(Pack(c[0], c[1], c[2]))
		if l != c[0] || n != c[1] || b != c[2] {
			t.Fatalf("Pack/Unpack %v -> %d %d %d", c, l, n, b)
		}
		if Pack(c[0], c[1], c[2]) == Dead {
			t.Fatalf("live head %v equals Dead", c)
		}
	}
}

// harness is one ring record plus the reference model: every recorded tick.
type harness struct {
	r         Ring
	head, id  atomic.Uint64
	slots     []atomic.Uint32
	limit, wq uint32
	penalty   bool
	recorded  []uint32 // model: recorded ticks, oldest first
	last      uint32
}

func newHarness(limit, wq uint32, penalty bool, start uint32) *harness {
	h := &harness{r: New(int(limit), wq, penalty), slots: make([]atomic.Uint32, limit), limit: limit, wq: wq, penalty: penalty}
	h.id.Store(99)
	// a key is born with its first request
	h.head.Store(h.r.First(h.slots, start, 1))
	h.recorded = []uint32{start}
	h.last = start
	return h
}

// model decides n at tick now by the definition.
func (h *harness) model(now, n uint32) (bool, uint32) {
	t := now
	if int32(t-h.last) < 0 {
		t = h.last
	}
	in := uint32(0)
	for _, x := range h.recorded {
		if t-x <= h.wq {
			in++
		}
	}
	ok := in+n <= h.limit
	if ok || h.penalty {
		for i := uint32(0); i < n; i++ {
			h.recorded = append(h.recorded, t)
		}
		if len(h.recorded) > int(h.limit) {
			h.recorded = h.recorded[len(h.recorded)-int(h.limit):]
		}
		h.last = t
	}
	after := uint32(0)
	for _, x := range h.recorded {
		if t-x <= h.wq {
			after++
		}
	}
	rem := uint32(0)
	if after < h.limit {
		rem = h.limit - after
	}
	return ok, rem
}

func (h *harness) step(t testing.TB, now, n uint32) {
	st, out := h.r.Take(&h.head, &h.id, 99, h.slots, now, n, true)
	ok, rem := h.model(now, n)
	if st == Stale || (st == Allowed) != ok || out.Remaining != rem {
		t.Fatalf("Take(n=%d) at %d: status %d remaining %d, model allowed=%v remaining %d", n, now, st, out.Remaining, ok, rem)
	}
}

// FuzzRing drives one ring with a sequence of operations chosen by the
// fuzzer (each 2 bytes: time step, n) and checks every decision against
// the model. Limit, window, penalty and the start tick (near the 32-bit
// wrap, to exercise wrap-around) come from the first bytes.
func FuzzRing(f *testing.F) {
	f.Add(uint8(2), uint8(10), false, uint32(0), []byte{0, 1, 9, 1, 1, 1, 1, 1, 1, 1, 8, 1, 1, 1})
	f.Add(uint8(5), uint8(3), true, uint32(1<<32-20), []byte{0, 2, 0, 3, 1, 1, 4, 5, 0, 1, 2, 2})
	f.Add(uint8(64), uint8(200), false, uint32(7), []byte{0, 64, 0, 1, 255, 63, 3, 2, 1, 1})
	f.Add(uint8(1), uint8(1), true, uint32(1<<31), []byte{0, 1, 1, 1, 2, 1, 0, 1})
	f.Fuzz(func(t *testing.T, limit, wq uint8, penalty bool, start uint32, ops []byte) {
		if limit == 0 || wq == 0 {
			return
		}
		h := newHarness(uint32(limit), uint32(wq), penalty, start)
		now := start
		for i := 0; i+1 < len(ops); i += 2 {
			now += uint32(ops[i] % 64)
			n := 1 + uint32(ops[i+1])%uint32(limit)
			if ops[i]&0x80 != 0 { // peek
				st, _ := h.r.Peek(&h.head, &h.id, 99, h.slots, now)
				if st == Idle {
					st = Allowed
				}
				saved := h.recorded
				ok, _ := h.model(now, 1)
				h.recorded = saved
				if (st == Allowed) != ok {
					t.Fatalf("Peek at %d: %d, model %v", now, st, ok)
				}
				continue
			}
			h.step(t, now, n)
		}
	})
}

func TestStaleRecord(t *testing.T) {
	h := newHarness(4, 10, false, 0)
	h.id.Store(7) // the record now belongs to another key
	if st, _ := h.r.Take(&h.head, &h.id, 99, h.slots, 1, 1, false); st != Stale {
		t.Fatalf("Take on a foreign record: %d, want Stale", st)
	}
	h.id.Store(99)
	h.head.Store(Dead)
	if st, _ := h.r.Peek(&h.head, &h.id, 99, h.slots, 1); st != Stale {
		t.Fatalf("Peek on a dead record: %d, want Stale", st)
	}
}

// Slots are only raised: a late writer with an older tick changes nothing.
func TestRaiseNeverLowers(t *testing.T) {
	s := make([]atomic.Uint32, 3)
	for i := range s {
		s[i].Store(100)
	}
	raise(s, 2, 3, 3, 50)
	raise(s, 0, 1, 3, 150)
	if s[0].Load() != 150 || s[1].Load() != 100 || s[2].Load() != 100 {
		t.Fatalf("slots %d %d %d", s[0].Load(), s[1].Load(), s[2].Load())
	}
}

func TestIdleAndReady(t *testing.T) {
	r := New(3, 10, false)
	h := Pack(100, 1, 1)
	late100 := uint32(100)
	late100 -= LateMax // LateMax ticks before the newest: late, not idle
	if r.IsIdle(h, 110) || !r.IsIdle(h, 111) || r.IsIdle(Dead, 1000) || r.IsIdle(h, late100) {
		t.Fatal("Idle boundary wrong")
	}
	if r.ReadyAt(h) != 111 {
		t.Fatalf("ReadyAt = %d", r.ReadyAt(h))
	}
}

// Regression: in Penalty mode a recorded denial at the tick of the newest
// batch brought the head word back to an earlier value, so a claimer paused
// before its CAS (it had seen that earlier value) over-admitted (ABA).
func TestPenaltyDenialAtSameTickDoesNotRepeatHead(t *testing.T) {
	r := New(2, 10, true)
	var head, id atomic.Uint64
	id.Store(1)
	slots := make([]atomic.Uint32, 2)
	const T = 5000
	head.Store(r.First(slots, T, 1)) // born at T; the other slot is old
	seen := head.Load()              // what a paused claimer would have loaded
	if st, _ := r.Take(&head, &id, 1, slots, T, 1, false); st != Allowed {
		t.Fatalf("second request at T: %d", st)
	}
	for i := 0; i < 5; i++ { // denied and recorded: changes nothing at T
		if st, _ := r.Take(&head, &id, 1, slots, T, 1, false); st != Denied {
			t.Fatalf("request %d at T: %d, want Denied", i+3, st)
		}
		if head.Load() == seen {
			t.Fatalf("head word %#x came back after %d penalty denials at one tick", seen, i+1)
		}
	}
	// a recorded denial that does replace an older entry still moves the head
	before := head.Load()
	if st, _ := r.Take(&head, &id, 1, slots, T+5, 1, false); st != Denied || head.Load() == before {
		t.Fatalf("penalty denial at a later tick: status %d, head moved %v", st, head.Load() != before)
	}
}

// Regression (found by a timing review): a time more than a window behind the
// key's newest tick was read as "ticks wrapped", so the key was wiped and
// the stale request admitted. Now a late time counts at the newest tick, up
// to LateMax ticks late, and only a state more than a window old is idle.
func TestLateTimeCountsAtNewest(t *testing.T) {
	r := New(1, 1000, false)
	var head, id atomic.Uint64
	id.Store(1)
	slots := make([]atomic.Uint32, 1)
	const T = 1 << 31
	head.Store(r.First(slots, T, 1))
	for _, late := range []uint32{T - 1, T - 1001, T - 5000, T - LateMax} {
		if st, _ := r.Take(&head, &id, 1, slots, late, 1, false); st != Denied {
			t.Fatalf("Take %d ticks late: %d, want Denied (counts at the newest tick)", T-late, st)
		}
		if st, _ := r.Peek(&head, &id, 1, slots, late); st != Denied {
			t.Fatalf("Peek %d ticks late: %d, want Denied", T-late, st)
		}
		if r.IsIdle(head.Load(), late) {
			t.Fatalf("state reported idle %d ticks before its newest tick", T-late)
		}
	}
	for _, age := range []uint64{1001, 1 << 31, 1<<32 - LateMax - 1} {
		head.Store(r.First(slots, T, 1))
		old := uint32(T + age)
		if !r.IsIdle(head.Load(), old) {
			t.Fatalf("state not idle %d ticks after its newest tick", age)
		}
		if st, _ := r.Peek(&head, &id, 1, slots, old); st != Idle {
			t.Fatalf("Peek %d ticks after the newest: %d, want Idle", age, st)
		}
		// Take records the request on the idle ring (resetting it in place
		// first when its oldest entry is RewriteAge ticks old or more).
		if st, _ := r.Take(&head, &id, 1, slots, old, 1, false); st != Allowed {
			t.Fatalf("Take %d ticks after the newest: %d, want Allowed", age, st)
		}
		if last, _, _ := Unpack(head.Load()); last != old {
			t.Fatalf("after the request: head %x", head.Load())
		}
		if age >= RewriteAge && slots[0].Load() != old-1000-1 {
			t.Fatalf("ring %d ticks idle not rewritten: slot %d", age, slots[0].Load())
		}
		if st, _ := r.Take(&head, &id, 1, slots, old, 1, false); st != Denied {
			t.Fatalf("second Take at %d: %d, want Denied", old, st)
		}
	}
}

// A ring that goes idle is written on as it is while its oldest entry is
// younger than RewriteAge; from that age on the next Take resets it in
// place: every slot is rewritten to a tick just outside the window (so no
// comparison ever sees two ticks 2^31 apart), the head carries the new
// request. While another request holds the resetting mark, Take and Peek
// report Busy; a record freed under the mark makes the resetter Stale.
func TestIdleRingResetsInPlace(t *testing.T) {
	r := New(4, 10, false)
	var head, id atomic.Uint64
	id.Store(5)
	slots := make([]atomic.Uint32, 4)
	head.Store(r.First(slots, 100, 1))
	if st, out := r.Take(&head, &id, 5, slots, 200, 2, true); st != Allowed || out.Remaining != 2 || out.ResetAfter != 11 {
		t.Fatalf("Take on an idle ring: %d %+v", st, out)
	}
	if last, next, batch := Unpack(head.Load()); last != 200 || next != 3 || batch != 2 {
		t.Fatalf("head after recording on the idle ring: %d %d %d", last, next, batch)
	}
	if v := slots[3].Load(); v != 100-10-1 {
		t.Fatalf("an old slot was rewritten (%d) though the ring's oldest entry was young", v)
	}
	far := uint32(200 + RewriteAge + 5)
	if st, out := r.Take(&head, &id, 5, slots, far, 2, true); st != Allowed || out.Remaining != 2 || out.ResetAfter != 11 {
		t.Fatalf("Take on a ring idle RewriteAge ticks: %d %+v", st, out)
	}
	for i := range slots {
		if v := slots[i].Load(); v != far-10-1 {
			t.Fatalf("slot %d = %d after the reset, want %d", i, v, far-10-1)
		}
	}
	if last, next, batch := Unpack(head.Load()); last != far || next != 2 || batch != 2 {
		t.Fatalf("head after the reset: %d %d %d", last, next, batch)
	}
	head.Store(resetting(300))
	if st, _ := r.Take(&head, &id, 5, slots, 301, 1, false); st != Busy {
		t.Fatalf("Take under the mark: %d, want Busy", st)
	}
	if st, _ := r.Peek(&head, &id, 5, slots, 301); st != Busy {
		t.Fatalf("Peek under the mark: %d, want Busy", st)
	}
	if st, _ := r.Take(&head, &id, 6, slots, 301, 1, false); st != Stale {
		t.Fatalf("Take of another key under the mark: %d, want Stale", st)
	}
	if r.IsIdle(head.Load(), 1000) {
		t.Fatal("a ring being reset reported idle")
	}
}

// snapshot returns the ring's slots as plain values.
func snapshot(slots []atomic.Uint32) []uint32 {
	out := make([]uint32, len(slots))
	for i := range slots {
		out[i] = slots[i].Load()
	}
	return out
}

// Admissions at the tick of the newest batch join it: they write the head
// word and no slot (one cache line per admission on a hot key, see
// "Contention"), and the ring still decides by every entry. The slots of
// the joined batch are written when a request at a later tick moves the
// head on, before it does.
func TestAdmissionsAtOneTickWriteOnlyTheHead(t *testing.T) {
	const limit, wq = 64, 10
	r := New(limit, wq, false)
	var head, id atomic.Uint64
	id.Store(1)
	slots := make([]atomic.Uint32, limit)
	const T = 1000
	head.Store(r.First(slots, T, 1))
	before := snapshot(slots)
	for i := 2; i <= MaxJoin; i++ {
		if st, _ := r.Take(&head, &id, 1, slots, T, 1, false); st != Allowed {
			t.Fatalf("request %d at T: %d, want Allowed", i, st)
		}
		if got := snapshot(slots); !slices.Equal(got, before) {
			t.Fatalf("request %d at the newest batch's tick wrote slots: %v, were %v", i, got, before)
		}
		if last, next, batch := Unpack(head.Load()); last != T || next != uint32(i) || batch != uint32(i) {
			t.Fatalf("head after request %d: last %d next %d batch %d, want %d %d %d", i, last, next, batch, T, i, i)
		}
	}
	// The batch is full (MaxJoin): one more at T starts a new batch, after
	// writing the full one's MaxJoin slots.
	if st, _ := r.Take(&head, &id, 1, slots, T, 1, false); st != Allowed {
		t.Fatalf("request %d at T: %d, want Allowed", MaxJoin+1, st)
	}
	for i := 0; i < MaxJoin; i++ {
		if v := slots[i].Load(); v != T {
			t.Fatalf("slot %d = %d after the head moved past its batch, want %d", i, v, T)
		}
	}
	if last, next, batch := Unpack(head.Load()); last != T || next != MaxJoin+1 || batch != 1 {
		t.Fatalf("head after a full batch: last %d next %d batch %d", last, next, batch)
	}
	// A later tick writes the newest batch (one entry) before moving on.
	if st, _ := r.Take(&head, &id, 1, slots, T+1, 1, false); st != Allowed {
		t.Fatalf("request at T+1: %d, want Allowed", st)
	}
	if v := slots[MaxJoin].Load(); v != T {
		t.Fatalf("slot %d = %d after a request at a later tick, want %d", MaxJoin, v, T)
	}
	// The window holds MaxJoin+2 entries: limit-(MaxJoin+2) more pass, then
	// denials, all decided by the entries whether in slots or in the head.
	for i := 0; i < limit-(MaxJoin+2); i++ {
		if st, _ := r.Take(&head, &id, 1, slots, T+1, 1, false); st != Allowed {
			t.Fatalf("request %d of the window: %d, want Allowed", MaxJoin+3+i, st)
		}
	}
	if st, _ := r.Take(&head, &id, 1, slots, T+wq, 1, false); st != Denied {
		t.Fatalf("request over the limit: %d, want Denied", st)
	}
	// The entries at T leave the window at T+wq+1: MaxJoin+1 pass again.
	for i := 0; i < MaxJoin+1; i++ {
		if st, _ := r.Take(&head, &id, 1, slots, T+wq+1, 1, false); st != Allowed {
			t.Fatalf("request %d after the entries at T left: %d, want Allowed", i, st)
		}
	}
	if st, _ := r.Take(&head, &id, 1, slots, T+wq+1, 1, false); st != Denied {
		t.Fatalf("request over the limit at T+wq+1: %d, want Denied", st)
	}
}

// Goroutines admitting on one ring at a few ticks, joining batches and
// moving the head on concurrently, admit exactly the limit per window: no
// entry is lost by a join or a help, none counted twice.
func TestConcurrentAdmissionsAtFewTicksAdmitExactlyTheLimit(t *testing.T) {
	const limit, wq, workers, tries = 100, 1000, 8, 200
	r := New(limit, wq, false)
	var head, id atomic.Uint64
	id.Store(1)
	slots := make([]atomic.Uint32, limit)
	const T = 1 << 31
	head.Store(r.First(slots, T, 1))
	for round, base := range []uint32{T, T + wq + 1, T + 2*wq + 2} {
		admitted := 0
		if round == 0 {
			admitted = 1 // the first request, at First
		}
		var wg sync.WaitGroup
		counts := make([]int, workers)
		for w := 0; w < workers; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < tries; i++ {
					// ticks base..base+3: all in one window, some late
					// (behind the newest), which count at the newest
					now := base + uint32((w+i)%4)
					if st, _ := r.Take(&head, &id, 1, slots, now, 1, false); st == Allowed {
						counts[w]++
					} else if st != Denied {
						t.Errorf("Take at %d: status %d", now, st)
						return
					}
				}
			}()
		}
		wg.Wait()
		for _, c := range counts {
			admitted += c
		}
		if admitted != limit {
			t.Fatalf("round %d: %d admitted in one window, want exactly %d", round, admitted, limit)
		}
	}
}
