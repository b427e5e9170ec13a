package offheap

import (
	"errors"
	"math"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"unsafe"
)

// checkSlab asserts the contract of a new slab: n words, zeroed, aligned,
// writable, and of kind want.
func checkSlab(t *testing.T, s *Slab, n int, want Kind) {
	t.Helper()
	w := s.Words()
	if len(w) != n || cap(w) != n {
		t.Fatalf("len/cap = %d/%d, want %d", len(w), cap(w), n)
	}
	if got := s.Kind(); got != want {
		t.Fatalf("Kind = %v, want %v", got, want)
	}
	if a := uintptr(unsafe.Pointer(&w[0])) % align; a != 0 {
		t.Fatalf("words start %d bytes past a %d-byte boundary", a, align)
	}
	if want == MmapHuge {
		if a := uintptr(unsafe.Pointer(&w[0])) % HugePageSize; a != 0 {
			t.Fatalf("huge slab starts %d bytes past a huge page boundary", a)
		}
	}
	for i, v := range w {
		if v != 0 {
			t.Fatalf("word %d = %#x, want 0", i, v)
		}
	}
	for i := range w {
		w[i] = uint64(i) * 0x9E3779B97F4A7C15
	}
	for i, v := range w {
		if v != uint64(i)*0x9E3779B97F4A7C15 {
			t.Fatalf("word %d reads %#x after write", i, v)
		}
	}
	if got := s.Bytes(); got != int64(n)*8 {
		t.Fatalf("Bytes = %d, want %d", got, n*8)
	}
}

func mmapKind(k Kind) Kind {
	if !mmapSupported {
		return Heap
	}
	if k == MmapHuge {
		if m := thpMode(); m != "always" && m != "madvise" {
			return Mmap
		}
	}
	return k
}

func TestNewKinds(t *testing.T) {
	auto := mmapKind(MmapHuge)
	if raceEnabled {
		auto = Heap
	}
	for _, tc := range []struct {
		ask, want Kind
	}{
		{Heap, Heap},
		{Mmap, mmapKind(Mmap)},
		{MmapHuge, mmapKind(MmapHuge)},
		{Auto, auto},
	} {
		for _, n := range []int{1, 7, 512, 1 << 18, 1<<18 + 3} {
			s, err := New(n, tc.ask)
			if err != nil {
				t.Fatalf("New(%d, %v): %v", n, tc.ask, err)
			}
			checkSlab(t, s, n, tc.want)
			if err := s.Free(); err != nil {
				t.Fatalf("Free: %v", err)
			}
			if s.Words() != nil {
				t.Fatal("Words not nil after Free")
			}
			if err := s.Free(); err != nil {
				t.Fatalf("second Free: %v", err)
			}
		}
	}
}

func TestNewRejectsBadInput(t *testing.T) {
	for _, n := range []int{0, -1, math.MaxInt, math.MaxInt / 8, MaxWords + 1} {
		if _, err := New(n, Heap); !errors.Is(err, ErrSize) {
			t.Errorf("New(%d): err = %v, want ErrSize", n, err)
		}
	}
	if _, err := New(1, MmapHuge+1); err == nil {
		t.Error("New with an unknown kind: no error")
	}
}

// The mmap path unavailable (as on every non-Linux platform): every kind
// is served from the heap.
func TestFallbackNoMmap(t *testing.T) {
	defer func(v bool) { mmapSupported = v }(mmapSupported)
	mmapSupported = false
	for _, k := range []Kind{Auto, Heap, Mmap, MmapHuge} {
		s, err := New(1000, k)
		if err != nil {
			t.Fatal(err)
		}
		checkSlab(t, s, 1000, Heap)
		if got := s.AnonHugeBytes(); got != -1 {
			t.Errorf("AnonHugeBytes of a heap slab = %d, want -1", got)
		}
		_ = s.Free()
	}
}

// THP off, or the kernel refusing MADV_HUGEPAGE: MmapHuge becomes Mmap.
func TestFallbackNoHugePages(t *testing.T) {
	if !mmapSupported {
		t.Skip("no mmap path on " + runtime.GOOS + "/" + runtime.GOARCH + ": TestFallbackNoMmap covers it")
	}
	defer func(m func() string) { thpMode = m }(thpMode)
	thpMode = func() string { return "never" }
	s, err := New(1<<16, MmapHuge)
	if err != nil {
		t.Fatal(err)
	}
	checkSlab(t, s, 1<<16, Mmap)
	_ = s.Free()

	thpMode = func() string { return "madvise" }
	defer func(m func([]byte, int) error) { madvise = m }(madvise)
	madvise = func([]byte, int) error { return syscall.EINVAL }
	s, err = New(1<<16, MmapHuge)
	if err != nil {
		t.Fatal(err)
	}
	checkSlab(t, s, 1<<16, Mmap)
	_ = s.Free()
}

// A huge slab that the kernel agreed to advise: after touching it, smaps
// says how much is backed by huge pages. Whether the kernel found free 2 MiB
// pages depends on fragmentation, so the amount is logged, not asserted;
// what is asserted is that the accounting finds the mapping.
func TestAnonHugeBytes(t *testing.T) {
	if mmapKind(MmapHuge) != MmapHuge {
		t.Skip("transparent huge pages unavailable here (THP mode " + thpModeOrNone() + ")")
	}
	const n = 4 * HugePageSize / 8
	s, err := New(n, MmapHuge)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Free()
	w := s.Words()
	for i := 0; i < n; i += 512 {
		w[i] = 1
	}
	got := s.AnonHugeBytes()
	if got < 0 || got > s.Bytes() {
		t.Fatalf("AnonHugeBytes = %d, want in [0, %d]", got, s.Bytes())
	}
	t.Logf("%d of %d bytes on huge pages", got, s.Bytes())

	m, err := New(n, Mmap)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Free()
	if got := m.AnonHugeBytes(); got < 0 {
		t.Fatalf("AnonHugeBytes of a 4k mapping = %d, want >= 0", got)
	}
}

func thpModeOrNone() string {
	if !mmapSupported {
		return "n/a"
	}
	if m := thpMode(); m != "" {
		return m
	}
	return "none"
}

// Concurrent CAS increments on every kind: no lost update. Under -race this
// exercises the detector on Heap; on mmap'd kinds it checks the atomics
// themselves (the detector does not see that memory).
func TestConcurrentCAS(t *testing.T) {
	const words, perG = 64, 20000
	for _, k := range []Kind{Heap, Mmap, MmapHuge} {
		t.Run(k.String(), func(t *testing.T) {
			s, err := New(words, k)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Free()
			w := s.Words()
			// Safety: atomic.Uint64 has the layout of a uint64; the words are
			// 8-byte aligned.
			a := unsafe.Slice((*atomic.Uint64)(unsafe.Pointer(&w[0])), len(w))
			g := runtime.GOMAXPROCS(0) + 1
			var wg sync.WaitGroup
			for range g {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range perG {
						p := &a[i%words]
						for {
							old := p.Load()
							if p.CompareAndSwap(old, old+1) {
								break
							}
						}
					}
				}()
			}
			wg.Wait()
			var sum uint64
			for i := range a {
				sum += a[i].Load()
			}
			if want := uint64(g * perG); sum != want {
				t.Fatalf("sum = %d, want %d", sum, want)
			}
		})
	}
}

func TestKindString(t *testing.T) {
	for k, want := range map[Kind]string{Auto: "auto", Heap: "heap", Mmap: "mmap-4k", MmapHuge: "mmap-huge", 9: "offheap.Kind(9)"} {
		if got := k.String(); got != want {
			t.Errorf("%d.String() = %q, want %q", uint8(k), got, want)
		}
	}
}

// HeapBytes matches what the runtime hands out: many allocations of one
// size grow the heap by HeapBytes of that size each.
func TestHeapBytesMatchesRuntime(t *testing.T) {
	for _, n := range []int64{100, 184, 1000, 4096 + 56, 20000, 32768, 40000, 64<<10 + 56} {
		const count = 256
		keep := make([][]uint64, count)
		var before, after runtime.MemStats
		runtime.GC()
		runtime.GC() // the second settles what the first left to sweep
		runtime.ReadMemStats(&before)
		for i := range keep {
			keep[i] = make([]uint64, (n+7)/8)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		per := float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / count
		want := float64(HeapBytes((n + 7) / 8 * 8))
		if per < want*0.94-16 || per > want*1.06+16 {
			t.Errorf("%d bytes: the heap grew %.0f per allocation, HeapBytes says %.0f", n, per, want)
		}
		runtime.KeepAlive(keep)
	}
}
