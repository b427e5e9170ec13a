package keyset

import (
	"strconv"
	"testing"
)

func TestKeysDistinctAndShared(t *testing.T) {
	keys := Keys(10_000)
	if len(keys) != 10_000 {
		t.Fatalf("len = %d", len(keys))
	}
	seen := make(map[string]bool, len(keys))
	for i, k := range keys {
		if k != "k"+strconv.Itoa(i) {
			t.Fatalf("keys[%d] = %q", i, k)
		}
		if seen[k] {
			t.Fatalf("duplicate key %q", k)
		}
		seen[k] = true
	}
	if again := Keys(10_000); &again[0] != &keys[0] {
		t.Fatal("Keys(n) rebuilt the set instead of sharing it")
	}
	fresh := KeysWithPrefix("n", 100)
	for _, k := range fresh {
		if seen[k] {
			t.Fatalf("prefix n key %q collides with prefix k", k)
		}
	}
}

func TestSequenceDeterministicAndInRange(t *testing.T) {
	for _, d := range []Dist{Uniform, Zipf} {
		s := Sequence(1000, d)
		if len(s) != SeqLen(1000) || len(s)&(len(s)-1) != 0 {
			t.Fatalf("%s: len %d is not SeqLen, a power of two", d, len(s))
		}
		for i, v := range s {
			if v >= 1000 {
				t.Fatalf("%s: s[%d] = %d out of range", d, i, v)
			}
		}
		Drop()
		again := Sequence(1000, d)
		for i := range s {
			if s[i] != again[i] {
				t.Fatalf("%s: sequence differs at %d after rebuild", d, i)
			}
		}
	}
}

// Zipf must put a large share on index 0 and uniform must not: the
// scenarios' names promise a skew.
func TestZipfIsSkewed(t *testing.T) {
	const n = 100_000
	share := func(d Dist) float64 {
		c := 0
		s := Sequence(n, d)
		for _, v := range s {
			if v == 0 {
				c++
			}
		}
		return float64(c) / float64(len(s))
	}
	if z := share(Zipf); z < 0.05 {
		t.Errorf("zipf: hottest key gets %.4f of accesses, want >= 0.05", z)
	}
	if u := share(Uniform); u > 0.001 {
		t.Errorf("uniform: key 0 gets %.4f of accesses, want <= 0.001", u)
	}
}

func TestSize(t *testing.T) {
	for n, want := range map[int]string{1: "1", 1_000: "1k", 100_000: "100k", 1_000_000: "1M", 10_000_000: "10M", 1500: "1500"} {
		if got := Size(n); got != want {
			t.Errorf("Size(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestSeqLen(t *testing.T) {
	for n, want := range map[int]int{1: 1 << 20, 1_000_000: 1 << 20, 2_000_000: 1 << 21, 10_000_000: 1 << 22} {
		if got := SeqLen(n); got != want {
			t.Errorf("SeqLen(%d) = %d, want %d", n, got, want)
		}
	}
}
