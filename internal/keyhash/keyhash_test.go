package keyhash

import (
	"fmt"
	"hash/maphash"
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/cespare/xxhash/v2"
)

func TestSumDeterministicPerHasher(t *testing.T) {
	h := New()
	c := h // a copy keeps the seed
	for i := range 1000 {
		k := "client-" + strconv.Itoa(i)
		if h.Sum(k) != h.Sum(k) || h.Sum(k) != c.Sum(k) {
			t.Fatalf("Sum(%q) not deterministic", k)
		}
		if got, want := h.Sum(k), sipRef(h.Key(), []byte(k)); got != want {
			t.Fatalf("Sum(%q) = %#x, the reference SipHash-2-4 = %#x", k, got, want)
		}
	}
}

// Two Hashers have independent keys: the same keys hash differently.
func TestKeysDiffer(t *testing.T) {
	a, b := New(), New()
	same := 0
	for i := range 1000 {
		k := strconv.Itoa(i)
		if a.Sum(k) == b.Sum(k) {
			same++
		}
	}
	if same != 0 {
		t.Fatalf("%d of 1000 keys hash equal under two fresh keys", same)
	}
}

func TestZeroHasherDoesNotPanic(t *testing.T) {
	var z Hasher
	if z.Sum("k") != z.Sum("k") {
		t.Fatal("zero Hasher not deterministic")
	}
	if got, want := z.Sum("k"), fallback.Sum("k"); got != want {
		t.Fatalf("zero Hasher Sum = %#x, want the fallback key's %#x", got, want)
	}
	if FromKey(z.Key()).Sum("k") != z.Sum("k") {
		t.Fatal("the zero Hasher's Key does not hash as it does")
	}
}

// Sequential keys (the benchmark's k0..k99999, and real client ids) spread
// over a power-of-two table by the low bits and over shards by the high
// bits: the fullest of 1024 buckets holds far fewer than a bad hash would
// put there. 200k keys in 1024 buckets average 195; a fair hash's maximum
// is about 195 + 4.5 sigma (~14) = 258 with overwhelming probability.
func TestSequentialKeysSpread(t *testing.T) {
	h := New()
	const n, buckets = 200_000, 1024
	var lo, hi [buckets]int
	for i := range n {
		s := h.Sum("k" + strconv.Itoa(i))
		lo[s%buckets]++
		hi[s>>(64-10)]++
	}
	for name, c := range map[string]*[buckets]int{"low bits": &lo, "high bits": &hi} {
		m := 0
		for _, v := range c {
			m = max(m, v)
		}
		if m > 300 {
			t.Errorf("%s: fullest bucket holds %d of %d keys (mean %d)", name, m, n, n/buckets)
		}
	}
}

func TestSumDoesNotAllocate(t *testing.T) {
	h := New()
	key := "client-1234567890"
	if a := testing.AllocsPerRun(1000, func() { _ = h.Sum(key) }); a != 0 {
		t.Fatalf("Sum allocates %v times per call", a)
	}
}

// FuzzSum: any key (invalid UTF-8, empty, long) hashes without panic,
// deterministically, to the same value as its bytes; a one-bit change of
// the key changes the hash (a miss has chance 2^-64 per input).
func FuzzSum(f *testing.F) {
	f.Add("", uint(0))
	f.Add("client-123", uint(3))
	f.Add("\xff\x00\x80 long key long key long key long key long key long key long key long key long key long key long key long key long key", uint(900))
	h := New()
	f.Fuzz(func(t *testing.T, key string, bit uint) {
		s := h.Sum(key)
		if s != h.Sum(key) || s != sipRef(h.Key(), []byte(key)) {
			t.Fatalf("Sum(%q) unstable or differs from its bytes", key)
		}
		if len(key) == 0 {
			return
		}
		b := []byte(key)
		bit %= uint(len(b)) * 8
		b[bit/8] ^= 1 << (bit % 8)
		if h.Sum(string(b)) == s {
			t.Fatalf("Sum(%q) == Sum(%q)", key, b)
		}
	})
}

// BenchmarkHash compares the candidates for the table's key hash at the key
// lengths gateways see (8: an IPv4 or short id; 16: an IPv6 or UUID bytes;
// 32: an API key; 64: a composite tenant/route/client key):
//
//   - xxhash=seeded-digest: today's shard.Table.Hash (Digest with a seed);
//   - xxhash=seeded-oneshot: the same hash without the Digest (xxh64 above);
//   - xxhash=unseeded: xxhash.Sum64String (assembly), the speed of light of
//     xxhash, but unseeded, so unfit (collisions can be precomputed);
//   - maphash: hash/maphash.String under a random seed, the hash this
//     package used before (its seed cannot be saved, see the package doc);
//   - siphash: this package's Sum (SipHash-2-4).
//
// cached hashes one key again and again (key in L1); keys=1M walks a
// million distinct keys in random order, so each hash starts with a cache
// miss on the key's bytes, as it does in a table lookup at scale.
func BenchmarkHash(b *testing.B) {
	const seed = 0x5eed
	h := New()
	mseed := maphash.MakeSeed()
	fns := []struct {
		name string
		fn   func(string) uint64
	}{
		{"xxhash=seeded-digest", func(s string) uint64 { return digest(seed, s) }},
		{"xxhash=seeded-oneshot", func(s string) uint64 { return xxh64(seed, s) }},
		{"xxhash=unseeded", xxhash.Sum64String},
		{"maphash", func(s string) uint64 { return maphash.String(mseed, s) }},
		{"siphash", h.Sum},
	}
	for _, n := range []int{8, 16, 32, 64} {
		keys, order := benchKeys(n, 1<<20)
		for _, f := range fns {
			b.Run(fmt.Sprintf("len=%d/%s/cached", n, f.name), func(b *testing.B) {
				b.ReportAllocs()
				var s uint64
				k := keys[0]
				for b.Loop() {
					s += f.fn(k)
				}
				sink = s
			})
			b.Run(fmt.Sprintf("len=%d/%s/keys=1M", n, f.name), func(b *testing.B) {
				b.ReportAllocs()
				var s uint64
				i := 0
				for b.Loop() {
					// Iterations are independent, as decisions on different
					// keys are: the CPU overlaps one key's cache miss with the
					// previous key's hash, so a hash with fewer instructions
					// leaves more room to overlap.
					s += f.fn(keys[order[i&(len(order)-1)]])
					i++
				}
				sink = s
			})
		}
	}
}

var sink uint64

// benchKeys returns count random keys of n printable bytes, laid out in
// one string, and a random visiting order.
func benchKeys(n, count int) ([]string, []uint32) {
	r := rand.New(rand.NewPCG(uint64(n), 1))
	buf := make([]byte, n*count)
	for i := range buf {
		buf[i] = byte(0x21 + r.IntN(94))
	}
	all := string(buf)
	keys := make([]string, count)
	for i := range keys {
		keys[i] = all[i*n : (i+1)*n]
	}
	order := make([]uint32, count)
	for i := range order {
		order[i] = uint32(r.IntN(count))
	}
	return keys, order
}
