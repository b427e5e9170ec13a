// Package keyhash is the key hash of slidelimit's tables: SipHash-2-4, a
// keyed pseudorandom function, under a random 128-bit key per table. The
// key can be read (Key) and set (FromKey), so that a snapshot of a table
// can be restored in another process with the same hashes (package engine:
// Limiter.WriteTo and ReadFrom); a snapshot therefore holds a secret.
//
// # Why a keyed PRF, not seeded xxhash
//
// A table that keeps only a key's 64-bit hash (not its bytes) merges two
// keys whose hashes are equal: they share one limit. The guarantee the
// tables give is that nobody can craft two keys that collide, because the
// hash is keyed by a secret, per-table random key.
//
// Seeded XXH64 does not give it. For keys shorter than 32 bytes (and for the
// last len%32 bytes of longer ones) XXH64 mixes each 8-byte lane into the
// state with XOR followed by a rotate, a multiply by an odd constant and an
// add; a difference in the top bit of a word passes through the multiply
// and the add unchanged, whatever the other bits are. Two 16-byte keys whose
// first lanes differ where the rotate sends the difference to the top bit,
// and whose second lanes cancel it, collide under every seed
// (TestSeededXXH64CollidesForEverySeed, which builds such pairs from
// printable ASCII). At 64 bytes the same trick collides for about half of
// all seeds (TestSeededXXH64CollidesForHalfTheSeeds). A keyed finalizer on
// top of an unseeded hash is no better: equal inputs to the finalizer stay
// equal.
//
// SipHash (Aumasson and Bernstein, "SipHash: a fast short-input PRF",
// 2012) is designed as a PRF for exactly this use, hash-flooding defence:
// without the key, finding two inputs that collide is as hard as
// distinguishing SipHash from a random function (no attack better than
// generic is known for SipHash-2-4). Its key is 128 bits that can be
// saved, where hash/maphash (which this package used before) keeps its
// per-process AES round keys hidden in the runtime: a maphash seed cannot
// be saved or restored, so a table hashed with it cannot be snapshotted.
//
// Why 2-4 and not 1-3: SipHash-2-4 is the paper's proposal, the one its
// security claim and its reference test vectors are for (TestSipHash24
// checks all 64); SipHash-1-3 (Rust's HashMap) saves 3 of the 8 rounds of
// a key under 8 bytes and 1 of each 8-byte block's 2, which is about
// 3-5 ns of a table lookup here, on a reduced-round variant with a weaker
// margin. We keep the analysed one.
//
// The cost, measured (BenchmarkHash, 2-core EPYC shared with other jobs,
// medians of 3 interleaved runs of 300 ms): for a key in cache, SipHash
// takes 15.6 / 20.5 / 40.8 / 50.2 ns at 8 / 16 / 32 / 64 bytes against
// maphash's 13.0 / 8.8 / 8.7 / 11.7 ns; on a stream of a million random
// keys (a cache miss on each key's bytes) 395-538 ns against 144-217 ns:
// maphash's few AES instructions let the CPU overlap one key's miss with
// the next, SipHash's 10-12 rounds fill the instruction window. Through
// the engine (package bench, BenchmarkAllow, the same code with maphash
// swapped in, 5 interleaved rounds of 300 ms,
// benchstat): +4.4 ns (SlidingLog) and +6.1 ns (SlidingCounter) on a hot
// key, short of significance (p = 0.08), and no difference at 100k and 1M
// keys, where the table's own cache misses dominate. That
// is the price of a table that can be saved; the table layout is
// unchanged.
//
// # Contract
//
//   - Sum is deterministic for one key: two Hashers with the same Key
//     return the same hashes, in any process (the hashes may be persisted
//     with their key, which is how engine snapshots work). They must never
//     be sent anywhere the key is not secret (Redis keys use the key bytes,
//     not this hash).
//   - Sum does not allocate and never panics, the zero Hasher included.
//   - Sum may return 0; a table that uses 0 for "empty" maps it elsewhere.
package keyhash

import (
	"crypto/rand"
	"encoding/binary"
	"math/bits"
)

// KeySize is the size of a Hasher's key in bytes.
const KeySize = 16

// Hasher hashes keys under one 128-bit key. Make one per table with New;
// copying a Hasher copies its key.
type Hasher struct {
	k0, k1 uint64
	keyed  bool // false: the zero Hasher, which hashes under fallback
}

// New returns a Hasher with a fresh random key (crypto/rand).
func New() Hasher {
	var k [KeySize]byte
	_, _ = rand.Read(k[:]) // never fails (it crashes the program instead) since Go 1.24
	return FromKey(k)
}

// FromKey returns the Hasher of key k (bytes 0-7 little-endian are the
// paper's k0, bytes 8-15 k1). Any value is a valid key.
func FromKey(k [KeySize]byte) Hasher {
	return Hasher{k0: binary.LittleEndian.Uint64(k[:8]), k1: binary.LittleEndian.Uint64(k[8:]), keyed: true}
}

// Key returns h's key (the zero Hasher's is the per-process fallback key):
// a Hasher from FromKey(h.Key()) hashes as h does.
func (h Hasher) Key() [KeySize]byte {
	if !h.keyed {
		h = fallback
	}
	var k [KeySize]byte
	binary.LittleEndian.PutUint64(k[:8], h.k0)
	binary.LittleEndian.PutUint64(k[8:], h.k1)
	return k
}

// fallback keys the zero Hasher, so that a forgotten New costs the
// per-table key (tables then share one per-process key), never a panic.
var fallback = New()

// Sum returns the 64-bit SipHash-2-4 of key.
func (h Hasher) Sum(key string) uint64 {
	if !h.keyed {
		h = fallback
	}
	return sum24(h.k0, h.k1, key)
}

// sum24 is SipHash-2-4 (the paper's section 2): two rounds per 8-byte
// block, four to finalize.
func sum24(k0, k1 uint64, s string) uint64 {
	v0 := k0 ^ 0x736f6d6570736575
	v1 := k1 ^ 0x646f72616e646f6d
	v2 := k0 ^ 0x6c7967656e657261
	v3 := k1 ^ 0x7465646279746573
	n := len(s)
	for len(s) >= 8 {
		// Eight byte loads the compiler combines into one little-endian
		// 64-bit load (no []byte conversion, no unsafe).
		m := uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
			uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56
		v3 ^= m
		v0, v1, v2, v3 = sipRound(v0, v1, v2, v3)
		v0, v1, v2, v3 = sipRound(v0, v1, v2, v3)
		v0 ^= m
		s = s[8:]
	}
	// The last block: the 0-7 bytes left, little-endian, and the length
	// modulo 256 in the top byte.
	b := uint64(n) << 56
	switch len(s) {
	case 7:
		b |= uint64(s[6]) << 48
		fallthrough
	case 6:
		b |= uint64(s[5]) << 40
		fallthrough
	case 5:
		b |= uint64(s[4]) << 32
		fallthrough
	case 4:
		b |= uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24
	case 3:
		b |= uint64(s[2]) << 16
		fallthrough
	case 2:
		b |= uint64(s[1]) << 8
		fallthrough
	case 1:
		b |= uint64(s[0])
	}
	v3 ^= b
	v0, v1, v2, v3 = sipRound(v0, v1, v2, v3)
	v0, v1, v2, v3 = sipRound(v0, v1, v2, v3)
	v0 ^= b
	v2 ^= 0xff
	v0, v1, v2, v3 = sipRound(v0, v1, v2, v3)
	v0, v1, v2, v3 = sipRound(v0, v1, v2, v3)
	v0, v1, v2, v3 = sipRound(v0, v1, v2, v3)
	v0, v1, v2, v3 = sipRound(v0, v1, v2, v3)
	return v0 ^ v1 ^ v2 ^ v3
}

// sipRound is SipRound: four add-rotate-xor half-rounds.
func sipRound(v0, v1, v2, v3 uint64) (uint64, uint64, uint64, uint64) {
	v0 += v1
	v1 = bits.RotateLeft64(v1, 13)
	v1 ^= v0
	v0 = bits.RotateLeft64(v0, 32)
	v2 += v3
	v3 = bits.RotateLeft64(v3, 16)
	v3 ^= v2
	v0 += v3
	v3 = bits.RotateLeft64(v3, 21)
	v3 ^= v0
	v2 += v1
	v1 = bits.RotateLeft64(v1, 17)
	v1 ^= v2
	v2 = bits.RotateLeft64(v2, 32)
	return v0, v1, v2, v3
}
