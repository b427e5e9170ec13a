package fastdiv

import (
	"math/rand/v2"
	"testing"
)

func check(t testing.TB, d, x uint64) {
	if x > MaxDividend {
		x = MaxDividend
	}
	if got, want := New(d).Div(x), x/d; got != want {
		t.Fatalf("Div(%d)/%d = %d, want %d", x, d, got, want)
	}
}

func TestDivTable(t *testing.T) {
	ds := []uint64{1, 2, 3, 5, 7, 10, 1000, 1e6, 1e9, 60e9, 3600e9, 86400e9, 1<<31 - 1, 1<<32 + 1, 1<<61 + 12345, MaxDividend, MaxDividend + 2}
	xs := []uint64{0, 1, 2, 999, 1000, 1001, 1e9 - 1, 1e9, 1e9 + 1, 1 << 40, MaxDividend - 1, MaxDividend}
	for _, d := range ds {
		for _, x := range xs {
			check(t, d, x)
			if x >= d {
				check(t, d, x-x%d)   // exact multiples
				check(t, d, x-x%d-1) // one below a multiple
			}
		}
	}
}

func TestDivRandom(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 200000; i++ {
		d := r.Uint64() >> r.UintN(64)
		if d == 0 {
			d = 1
		}
		x := r.Uint64() >> (2 + r.UintN(62))
		check(t, d, x)
	}
}

func FuzzDiv(f *testing.F) {
	f.Add(uint64(1e9), uint64(123456789012))
	f.Add(uint64(3), uint64(MaxDividend))
	f.Fuzz(func(t *testing.T, d, x uint64) {
		if d == 0 {
			return
		}
		check(t, d, x)
	})
}

func BenchmarkDiv(b *testing.B) {
	v := New(1_000_000_007)
	var s uint64
	for i := 0; i < b.N; i++ {
		s += v.Div(uint64(i) * 7919)
	}
	_ = s
}
