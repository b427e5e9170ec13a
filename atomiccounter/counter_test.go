package atomiccounter

import (
	"math/big"
	"math/rand/v2"
	"reflect"
	"sync/atomic"
	"testing"
)

func TestPackLayout(t *testing.T) {
	w := Pack(0xABCDEF, 0x12345, 0xFEDCB)
	if w != 0xABCDEF_12345_FEDCB {
		t.Fatalf("Pack = %#x", w)
	}
	if win, p, c := Unpack(w); win != 0xABCDEF || p != 0x12345 || c != 0xFEDCB {
		t.Fatalf("Unpack = %#x %#x %#x", win, p, c)
	}
	if Pack(1<<24|5, 1<<20|3, 1<<20|4) != Pack(5, 3, 4) {
		t.Fatal("Pack does not mask fields to their widths")
	}
}

// FuzzPack: every field triple round-trips through the word.
func FuzzPack(f *testing.F) {
	f.Add(uint64(0), uint32(0), uint32(1))
	f.Add(uint64(windowMask), uint32(MaxCount), uint32(MaxCount))
	f.Fuzz(func(t *testing.T, win uint64, prev, cur uint32) {
		w := Pack(win, prev, cur)
		gw, gp, gc := Unpack(w)
		if gw != win&windowMask || gp != prev&countMask || gc != cur&countMask {
			t.Fatalf("round trip of %d %d %d gave %d %d %d", win, prev, cur, gw, gp, gc)
		}
	})
}

// model is the two-window formula in exact rationals.
type model struct {
	limit, window  int64
	penalty        bool
	win, prev, cur int64
	started        bool
}

func (m *model) take(now int64, n int64) bool {
	win, el := now/m.window, now%m.window
	var prev, cur int64
	if m.started {
		switch {
		case m.win == win:
			prev, cur = m.prev, m.cur
		case m.win == win-1:
			prev = m.cur
		case m.win > win:
			win, el, prev, cur = m.win, 0, m.prev, m.cur
		}
	}
	est := new(big.Rat).SetFrac64(prev*(m.window-el), m.window)
	est.Add(est, big.NewRat(cur+n, 1))
	ok := est.Cmp(big.NewRat(m.limit, 1)) <= 0
	if ok || m.penalty {
		m.win, m.prev, m.cur, m.started = win, prev, min(cur+n, MaxCount), true
	}
	return ok
}

// FuzzCounter drives one packed counter with fuzzer-chosen steps and checks
// each decision against the exact formula.
func FuzzCounter(f *testing.F) {
	f.Add(uint16(4), uint32(1000), false, []byte{0, 4, 10, 1, 200, 1, 250, 1, 255, 2})
	f.Add(uint16(1), uint32(7), true, []byte{3, 1, 3, 1, 0, 1, 9, 1})
	f.Add(uint16(100), uint32(1<<30), false, []byte{1, 50, 1, 50, 1, 1, 255, 99})
	f.Fuzz(func(t *testing.T, limit uint16, window uint32, penalty bool, ops []byte) {
		if limit == 0 || window == 0 {
			return
		}
		c := New(int(limit), int64(window), penalty)
		m := &model{limit: int64(limit), window: int64(window), penalty: penalty}
		var st, id atomic.Uint64
		id.Store(1)
		now := int64(0)
		for i := 0; i+1 < len(ops); i += 2 {
			now += int64(ops[i]) * int64(window) / 97
			n := 1 + uint32(ops[i+1])%uint32(limit)
			var ok bool
			if !m.started {
				st.Store(c.First(now, n))
				ok = true
			} else {
				s, _ := c.Take(&st, &id, 1, now, n)
				ok = s == Allowed
			}
			if want := m.take(now, int64(n)); ok != want {
				t.Fatalf("step %d: Take(%d) at %d = %v, model %v", i/2, n, now, ok, want)
			}
		}
	})
}

func TestDescribe(t *testing.T) {
	c := New(10, 1000, false)
	// 8 in the previous window, 3 in this one, 25% elapsed: estimate 9.
	s := Snapshot{Window: 5, Elapsed: 250, Counts: Counts{Prev: 8, Cur: 3}}
	rem, retry, reset := c.Describe(s, 2, false, false)
	if rem != 1 || reset != 1750 {
		t.Fatalf("remaining %d reset %d", rem, reset)
	}
	// 2 more need 8*(1000-e)/1000 <= 5: e >= 375, i.e. 125 from now
	if retry != 125 {
		t.Fatalf("retry = %d, want 125", retry)
	}
	// past the limit in the current window: wait for the next one
	s = Snapshot{Window: 5, Elapsed: 100, Counts: Counts{Prev: 0, Cur: 10}}
	if _, retry, _ := c.Describe(s, 1, false, false); retry != 900+100 {
		t.Fatalf("retry = %d, want 1000 (next window, e=100: 10*0.9+1 = 10)", retry)
	}
}

func TestIdleAndReadyAt(t *testing.T) {
	c := New(5, 100, false)
	w := Pack(3, 1, 1)
	if c.Idle(w, 499) || !c.Idle(w, 500) || c.Idle(Free, 1000) {
		t.Fatal("Idle boundary wrong")
	}
	if got := c.ReadyAt(w, 350); got != 500 {
		t.Fatalf("ReadyAt = %d, want 500", got)
	}
}

func TestStale(t *testing.T) {
	c := New(5, 100, false)
	var st, id atomic.Uint64
	id.Store(2)
	st.Store(c.First(0, 1))
	if s, _ := c.Take(&st, &id, 1, 10, 1); s != Stale {
		t.Fatal("Take on a foreign record not Stale")
	}
	id.Store(1)
	st.Store(Free)
	if s, _ := c.Peek(&st, &id, 1, 10); s != Stale {
		t.Fatal("Peek on a free record not Stale")
	}
}

// TestDescribeRemainingMatchesExactCeiling checks Remaining against the
// exact ceil(prev*(W-e)/W) in big integers, for Windows on both sides of
// fastdiv's range (DescribeLimit divides by the reciprocal when the
// product is below 2^62 and by Div64 above).
func TestDescribeRemainingMatchesExactCeiling(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 11))
	windows := []uint64{1, 3, 1000, 999_999_937, 60e9, 1 << 42, 1<<42 + 1, 3600e9 * 24 * 365, 1 << 62}
	for _, W := range windows {
		c := New(MaxCount, int64(W), false)
		for range 2000 {
			prev := uint32(r.IntN(MaxCount + 1))
			cur := uint32(r.IntN(MaxCount + 1))
			e := r.Uint64N(W)
			switch r.IntN(4) { // the edges: e = 0, e = W-1, prev at its maximum
			case 0:
				e = 0
			case 1:
				e = W - 1
			case 2:
				prev = MaxCount
			}
			s := Snapshot{Window: 9, Elapsed: e, Counts: Counts{Prev: prev, Cur: cur}}
			rem, _, _ := c.DescribeLimit(s, 1, MaxCount, true, false)
			num := new(big.Int).Mul(new(big.Int).SetUint64(uint64(prev)), new(big.Int).SetUint64(W-e))
			q, m := new(big.Int).QuoRem(num, new(big.Int).SetUint64(W), new(big.Int))
			if m.Sign() != 0 {
				q.Add(q, big.NewInt(1))
			}
			want := int64(MaxCount) - q.Int64() - int64(cur)
			if want < 0 {
				want = 0
			}
			if int64(rem) != want {
				t.Fatalf("W=%d prev=%d cur=%d e=%d: Remaining %d, want %d", W, prev, cur, e, rem, want)
			}
		}
	}
}

// TestSnapshotFitsInRegisters checks that Snapshot stays a value the
// compiler keeps in registers (at most four fields, 32 bytes): Take
// returns one on every decision, and a larger struct is copied through
// memory at each return (see the type's doc).
func TestSnapshotFitsInRegisters(t *testing.T) {
	typ := reflect.TypeFor[Snapshot]()
	if typ.NumField() > 4 || typ.Size() > 32 {
		t.Fatalf("Snapshot has %d fields in %d bytes; at most 4 fields in 32 bytes stay in registers", typ.NumField(), typ.Size())
	}
}

// TestIdleReadyAtIsTheFirstIdleTime checks IdleReadyAt against Idle: a
// live word idle at now reads (true, now); otherwise the word is idle at
// readyAt and at no time from now to readyAt-1 (probed at the window
// boundaries in between, where Idle can change). Words are current, one
// or more windows old, ahead of now (late requests), and Reset's.
func TestIdleReadyAtIsTheFirstIdleTime(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 5))
	const W = 1000
	c := New(10, W, false)
	for range 20000 {
		nowWin := uint64(1<<24 + r.IntN(1<<25))
		now := int64(nowWin*W + r.Uint64N(W))
		var ww uint64
		switch r.IntN(3) {
		case 0:
			ww = nowWin - uint64(r.IntN(4)) // current to three windows old
		case 1:
			ww = nowWin + uint64(1+r.IntN(3)) // ahead of now
		default:
			ww = nowWin - uint64(r.IntN(1<<20))
		}
		prev, cur := uint32(r.IntN(3)), uint32(1+r.IntN(3))
		if r.IntN(4) == 0 {
			prev, cur = 0, 0 // Reset's word
		}
		w := Pack(ww, prev, cur)
		idle, at := c.IdleReadyAt(w, now)
		if idle != c.Idle(w, now) {
			t.Fatalf("word %x at %d: IdleReadyAt says idle=%v, Idle %v", w, now, idle, c.Idle(w, now))
		}
		if idle {
			if at != now {
				t.Fatalf("word %x idle at %d: readyAt %d, want now", w, now, at)
			}
			continue
		}
		if at <= now || !c.Idle(w, at) {
			t.Fatalf("word %x at %d: readyAt %d is not a later idle time", w, now, at)
		}
		for x := now; x < at; x = (x/W + 1) * W {
			if c.Idle(w, x) || c.Idle(w, min(at-1, (x/W+1)*W-1)) {
				t.Fatalf("word %x at %d: idle at %d, before readyAt %d", w, now, x, at)
			}
		}
	}
}
