package redisstore

import (
	"strconv"
	"strings"

	"github.com/slidelimit/slidelimit/engine"
)

// keyspace names the Redis keys of one limiter configuration. The layout
// (documented in the package doc, "Keys") is
//
//	<Prefix>{<tag>}<alg>/<Window>/<Limit>:<key>   the state
//	<Prefix>{<tag>}<alg>/<Window>/<Limit>!<key>   SlidingCounter's return marks (Hybrid)
//	<Prefix>{<tag>}gcra/<Window>/<Limit>/<Burst>:<key>   GCRA's state
//
// where tag is four hex digits of a digest of key (14 bits of FNV-1a). Redis Cluster hashes
// only the bytes between the first '{' and the first '}' after it; the
// prefix has no brace and the tag is hex, so that is always the tag,
// whatever bytes key holds (empty, '{', '}', binary): every key of one
// limiter key lands in one slot, and no caller can choose a slot. The
// configuration part (algorithm, Window, Limit) keeps limiters that would
// read each other's state differently apart: a SlidingLog of 5 per minute
// and one of 2 per second on the same keys share nothing.
//
// The names are injective: the prefix is fixed, the tag has a fixed
// length, the configuration part ends at the first ':' or '!' after the
// tag (Window is written by time.Duration.String, which has neither), and
// the rest is the key verbatim.
type keyspace struct {
	head string // Prefix + "{"
	mid  string // "}" + alg + "/" + Window + "/" + Limit
}

// tagBits is the digest width in the tag: 14 bits, 16384 tags, as many
// as Redis Cluster has slots. A tag then names one slot (so one node of a
// cluster or of a Ring), which the clock estimates are kept per (see
// serverClock).
const tagBits = 14

func newKeyspace(c Config) keyspace {
	mid := "}log/" + c.Window.String() + "/" + strconv.Itoa(c.Limit)
	switch c.Algorithm {
	case engine.SlidingCounter:
		mid = "}ctr/" + c.Window.String() + "/" + strconv.Itoa(c.Limit)
	case engine.GCRA:
		// The burst is part of what the state means (a TAT is judged
		// against it), so it is named too.
		mid = "}gcra/" + c.Window.String() + "/" + strconv.Itoa(c.Limit) + "/" + strconv.Itoa(c.Burst)
	}
	return keyspace{head: c.Prefix + "{", mid: mid}
}

// tag returns the digest of key that names its hash tag, < 1<<tagBits:
// FNV-1a (64 bits), folded. Every process of a fleet must compute the same
// tag for a key, so the hash is fixed (no per-process seed); it only spreads
// keys over slots, and a caller who aims many keys at one slot gains
// nothing it would not get from hammering one key.
func tag(key string) uint16 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(key); i++ {
		h ^= uint64(key[i])
		h *= 1099511628211
	}
	h ^= h >> 32
	h ^= h >> 16
	return uint16(h & (1<<tagBits - 1))
}

// state returns the name of key's state and its tag.
func (ks keyspace) state(key string) (string, uint16) {
	t := tag(key)
	return ks.name(t, ':', key), t
}

// marks returns the name of the Hybrid's return marks for a SlidingCounter
// key (see counterLeaseScript).
func (ks keyspace) marks(key string) string { return ks.name(tag(key), '!', key) }

const hexDigits = "0123456789abcdef"

func (ks keyspace) name(t uint16, sep byte, key string) string {
	var b strings.Builder
	b.Grow(len(ks.head) + 4 + len(ks.mid) + 1 + len(key))
	b.WriteString(ks.head)
	b.WriteByte(hexDigits[t>>12&0xf])
	b.WriteByte(hexDigits[t>>8&0xf])
	b.WriteByte(hexDigits[t>>4&0xf])
	b.WriteByte(hexDigits[t&0xf])
	b.WriteString(ks.mid)
	b.WriteByte(sep)
	b.WriteString(key)
	return b.String()
}
