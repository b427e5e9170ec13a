package shard

import (
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"unsafe"
)

// Test words for Flat: live states are even and >= 2, Free 0, Moved 1.
// The idle test calls a state idle iff it is below the time (so tests
// choose what is idle by the times they pass).
const (
	testFree  = 0
	testMoved = 1
)

func newTestFlat(t testing.TB, shards, maxKeys int, maxBytes int64) *Flat {
	t.Helper()
	f, err := NewFlat(FlatConfig{Shards: shards, MaxKeys: maxKeys, MaxBytes: maxBytes, Free: testFree, Moved: testMoved,
		Idle: func(w uint64, now int64) (bool, int64) { return int64(w) < now, int64(w) },
		Now:  func() int64 { return 0 }})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func flatInsert(f *Flat, h, state uint64, now int64) bool {
	s := f.ShardAt(int(h & f.mask))
	s.Lock()
	defer s.Unlock()
	if f.Find(s, h) != nil {
		panic("present")
	}
	rec, _, ok := f.Claim(s, h, now)
	if !ok {
		return false
	}
	f.Publish(s, rec, h, state)
	return true
}

// flatFree frees h by the table's protocol (an idle test that says yes:
// state 2 is below now 3).
func flatFree(t *testing.T, f *Flat, h uint64) {
	s := f.ShardAt(int(h & f.mask))
	s.Lock()
	defer s.Unlock()
	rec := f.Find(s, h)
	if rec == nil {
		t.Fatalf("free: %x missing", h)
	}
	rec.State.Store(2)
	if freed, _ := f.tryFree(s, rec, 3, false, false); !freed {
		t.Fatalf("free: %x not freed", h)
	}
}

func TestFlatLayout(t *testing.T) {
	var s FlatShard
	if sz := unsafe.Sizeof(s); sz%CacheLine != 0 {
		t.Fatalf("Sizeof(FlatShard) = %d, not a multiple of %d", sz, CacheLine)
	}
	if off := unsafe.Offsetof(s.mu); off < CacheLine {
		t.Fatalf("mu at offset %d shares a line with the table pointer", off)
	}
	f := newTestFlat(t, 1, 100, 0)
	tab := f.shards[0].tab.Load()
	if a := uintptr(unsafe.Pointer(&tab.recs[0])) % CacheLine; a != 0 {
		t.Fatalf("table starts %d bytes into a cache line", a)
	}
	for keys := int64(0); keys < 100000; keys += 97 {
		nb := bucketsFor(keys)
		if slots := nb * bucketSlots; keys > 0 && float64(slots)*16/float64(keys) > FlatBytesPerKey+float64(minBuckets*bucketSlots*16)/float64(keys) {
			t.Fatalf("%d keys: %d slots cost more than %d B/key", keys, slots, FlatBytesPerKey)
		}
		if nb*bucketSlots*7 < uint64(keys)*8 {
			t.Fatalf("%d keys: %d buckets over the 7/8 load", keys, nb)
		}
	}
}

// The hash never takes the empty or tombstone marks.
func TestFlatHashMarks(t *testing.T) {
	f := newTestFlat(t, 1, 1, 0)
	for i := 0; i < 100000; i++ {
		if h := f.Hash(string(rune(i))); h <= hashTomb {
			t.Fatalf("Hash = %d", h)
		}
	}
}

// The table agrees with a map through random inserts and frees, across
// growth, tombstone purges and shrinking sweeps, with hashes crowded into
// a few home buckets so that probes run across buckets and wrap.
func TestFlatMatchesMap(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	f := newTestFlat(t, 2, 5000, 0)
	model := map[uint64]uint64{}
	var keys []uint64
	check := func(step int) {
		t.Helper()
		for _, h := range keys {
			_, rec := f.Lookup(h)
			if rec == nil || rec.Hash.Load() != h || rec.State.Load() != model[h] {
				t.Fatalf("step %d: key %x lost or wrong", step, h)
			}
		}
		for j := 0; j < 50; j++ {
			h := r.Uint64() | 2
			if _, rec := f.Lookup(h); rec != nil && model[h] == 0 {
				t.Fatalf("step %d: phantom key %x", step, h)
			}
		}
		live := 0
		for i := range f.shards {
			live += f.shards[i].Len()
		}
		if live != len(model) || f.live.Load() != int64(len(model)) {
			t.Fatalf("step %d: Len %d, reserved %d, model %d", step, live, f.live.Load(), len(model))
		}
	}
	for i := 0; i < 60000; i++ {
		switch {
		case len(keys) > 0 && (r.IntN(3) == 0 || len(keys) >= 4000):
			j := r.IntN(len(keys))
			h := keys[j]
			keys[j] = keys[len(keys)-1]
			keys = keys[:len(keys)-1]
			flatFree(t, f, h)
			delete(model, h)
		case i%20000 > 15000 && len(keys) > 0: // drain phases, so that sweeps shrink
			j := len(keys) - 1
			flatFree(t, f, keys[j])
			delete(model, keys[j])
			keys = keys[:j]
		default:
			h := r.Uint64()
			if r.IntN(4) == 0 {
				h = h&0xFFFF | 3<<62 // few home buckets: long probes
			}
			if h <= hashTomb || model[h] != 0 {
				continue
			}
			st := uint64(r.IntN(1000)+2) * 2
			if !flatInsert(f, h, st, 0) {
				t.Fatalf("step %d: insert refused below the bound", i)
			}
			model[h] = st
			keys = append(keys, h)
		}
		if i%997 == 0 {
			check(i)
			f.Sweep(0, false) // nothing idle at 0: only shrinks
			check(i)
		}
	}
}

// Lock-free CAS increments on stable keys while other keys churn and the
// shard's table is rebuilt (grown, purged, shrunk) under them: no
// increment is lost and none is applied twice, which is what the Moved
// protocol promises.
func TestFlatNoLostWriteAcrossRebuilds(t *testing.T) {
	f := newTestFlat(t, 1, 1<<20, 0)
	r := rand.New(rand.NewPCG(7, 8))
	stable := make([]uint64, 8)
	for i := range stable {
		stable[i] = r.Uint64() | 2
		flatInsert(f, stable[i], 2, 0)
	}
	var stop atomic.Bool
	var wg sync.WaitGroup
	var moved, total atomic.Int64
	wins := make([][]int64, 2)
	for g := range wins {
		wins[g] = make([]int64, len(stable))
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; !stop.Load(); i++ {
				k := (i*7 + g) % len(stable)
				h := stable[k]
				s, rec := f.Lookup(h)
				if rec == nil {
					s.Lock()
					found := f.Find(s, h) != nil
					s.Unlock()
					if !found {
						t.Errorf("stable key %x missing under the lock", h)
						return
					}
					continue
				}
				w := rec.State.Load()
				if w == testFree || w == testMoved || rec.Hash.Load() != h {
					moved.Add(1)
					s.Lock() // moved: wait for the rebuild
					s.Unlock()
					continue
				}
				if rec.State.CompareAndSwap(w, w+2) {
					wins[g][k]++
					total.Add(1)
				} else if rec.State.Load() == testMoved {
					moved.Add(1) // the CAS lost to a move
				}
			}
		}(g)
	}
	// Churn until the readers have won many CASes and met moved records
	// (so the interleavings the test is about happened), within a bound.
	var churn []uint64
	for i := 0; i < 40000 || (i < 4_000_000 && (total.Load() < 100000 || moved.Load() < 10)); i++ {
		if len(churn) > 3000 || (len(churn) > 0 && r.IntN(2) == 0) {
			j := r.IntN(len(churn))
			flatFree(t, f, churn[j])
			churn[j] = churn[len(churn)-1]
			churn = churn[:len(churn)-1]
		} else {
			h := r.Uint64() | 2
			flatInsert(f, h, 4, 0)
			churn = append(churn, h)
		}
		if i%5000 == 4999 {
			for _, h := range churn {
				flatFree(t, f, h)
			}
			churn = churn[:0]
			f.Sweep(0, false) // shrink
		}
		if i%50 == 0 { // rebuilds back to back, the readers' hardest case
			s := f.ShardAt(0)
			s.Lock()
			for j := 0; j < 20; j++ {
				if _, err := f.rebuild(s, s.live.Load()+int64(j%3)*50); err != nil {
					t.Fatal(err)
				}
			}
			s.Unlock()
		}
	}
	stop.Store(true)
	wg.Wait()
	t.Logf("%d increments, %d reads or CASes met a moved record", total.Load(), moved.Load())
	if total.Load() == 0 {
		t.Fatal("the readers never ran during the churn")
	}
	for k, h := range stable {
		s := f.ShardAt(0)
		s.Lock()
		got := f.Find(s, h).State.Load()
		s.Unlock()
		if want := uint64(2 + 2*(wins[0][k]+wins[1][k])); got != want {
			t.Fatalf("key %d: state %d, want %d (2 + 2 x %d wins)", k, got, want, wins[0][k]+wins[1][k])
		}
	}
}

// MaxKeys is exact: the table takes MaxKeys keys whatever their shards,
// then refuses, then reuses an idle key of the new key's shard.
func TestFlatBoundAndLazyReuse(t *testing.T) {
	f := newTestFlat(t, 64, 100, 0)
	r := rand.New(rand.NewPCG(9, 10))
	var keys []uint64
	for len(keys) < 100 {
		h := r.Uint64() | 2
		if !flatInsert(f, h, 10, 0) { // state 10: idle from time 11 on
			t.Fatalf("insert %d refused below the bound", len(keys))
		}
		keys = append(keys, h)
	}
	h := keys[0] ^ 0x100 // same shard as keys[0]
	if flatInsert(f, h, 10, 5) {
		t.Fatal("insert past the bound while nothing is idle")
	}
	if !flatInsert(f, h, 20, 11) {
		t.Fatal("no lazy reuse of an idle key of the shard")
	}
	if f.live.Load() != 100 || f.Reclaimed() != 1 {
		t.Fatalf("reserved %d, reclaimed %d", f.live.Load(), f.Reclaimed())
	}
}

// A growth that would pass MaxBytes is refused (the key overflows) and
// gives its reservation back.
func TestFlatMaxBytes(t *testing.T) {
	base := int64(unsafe.Sizeof(FlatShard{})) + tabCost(minBuckets)
	room := base + tabCost(minBuckets+1) - tabCost(minBuckets) // room for one more bucket only
	f := newTestFlat(t, 1, 1000, room)
	n := 0
	for r := rand.New(rand.NewPCG(1, 1)); ; n++ {
		if !flatInsert(f, r.Uint64()|2, 2, 0) {
			break
		}
	}
	if n != 7 || f.live.Load() != 7 || f.Bytes() > room {
		t.Fatalf("took %d keys (reserved %d) in %d bytes", n, f.live.Load(), f.Bytes())
	}
}

// A sweep frees idle keys only, judges each with a fresh clock reading
// (here: the table's Now is ahead of the sweep's time) and shrinks.
func TestFlatSweep(t *testing.T) {
	var clock atomic.Int64
	f, err := NewFlat(FlatConfig{Shards: 4, MaxKeys: 10000, Free: testFree, Moved: testMoved,
		Idle: func(w uint64, now int64) (bool, int64) { return int64(w) < now, int64(w) },
		Now:  clock.Load})
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(2, 3))
	var old, young []uint64
	for i := 0; i < 4000; i++ {
		h := r.Uint64() | 2
		st := uint64(100)
		if i%10 == 0 {
			st = 1000
			young = append(young, h)
		} else {
			old = append(old, h)
		}
		flatInsert(f, h, st, 0)
	}
	before := f.Bytes()
	clock.Store(500) // the sweep passes 0; the fresh reading says 500
	if n := f.Sweep(0, false); n != len(old) {
		t.Fatalf("swept %d, want %d", n, len(old))
	}
	for _, h := range young {
		if _, rec := f.Lookup(h); rec == nil {
			t.Fatalf("young key %x freed", h)
		}
	}
	if after := f.Bytes(); after*4 > before {
		t.Fatalf("bytes %d -> %d: not shrunk", before, after)
	}
}
