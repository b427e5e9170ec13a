package keyset

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/slidelimit/slidelimit/engine"
)

// ZipfS is the Zipf exponent of the skewed access pattern: s = 1.1 gives
// the heavy head (a few keys take a large share) seen in API traffic.
const ZipfS = 1.1

// Dist is an access distribution over a key set.
type Dist string

const (
	Uniform Dist = "uniform"
	Zipf    Dist = "zipf"
)

// Profile is a limit configuration shared by every implementation in one
// scenario: Limit requests per Window. Token-bucket peers get rate
// Limit/Window and burst Limit.
//
// Benchmarks compress time: one core issues 10^7 or more decisions a
// second, so windows are scaled down from a gateway's minutes to keep the
// allowed fraction what the scenario's name says. Each benchmark reports
// the fraction it actually saw as the allowed/op metric.
type Profile struct {
	Limit  int
	Window time.Duration
}

var (
	// HotAllowed lets one key through at up to 655 M decisions/s, faster
	// than any implementation here runs, so the hot key stays allowed.
	// Limit is SlidingLog's maximum (engine.MaxLogLimit).
	HotAllowed = Profile{Limit: 65535, Window: 100 * time.Microsecond}
	// HotDenied admits 10 requests an hour: after the first 10, every
	// decision on the hot key is a denial.
	HotDenied = Profile{Limit: 10, Window: time.Hour}
	// Keyed is the profile of the many-keys scenarios: 8 requests per
	// 10 ms per key (800/s). Uniform access to 100 k keys or more stays
	// under it; the head of a Zipf distribution, like a hot client, is
	// limited. Limit is small because SlidingLog keeps Limit timestamps
	// per key and the 10 M-key case must fit in memory.
	Keyed = Profile{Limit: 8, Window: 10 * time.Millisecond}
)

// gcraMinInterval is the shortest Window/MaxLimit engine.New accepts for
// GCRA: it counts a request as at least that much of its clock.
const gcraMinInterval = 200 * time.Nanosecond

// EngineConfig returns p as an engine.Config for algo. GCRA cannot take a
// rate above one request per gcraMinInterval (HotAllowed asks 655 M/s):
// there it gets the fastest rate it accepts and a bucket of
// engine.MaxGCRALimit, about 10^9 requests, which no benchmark run
// empties, so the hot key stays allowed as the profile says and every
// implementation decides on the same admitting path.
func (p Profile) EngineConfig(algo engine.Algorithm) engine.Config {
	cfg := engine.Config{Algorithm: algo, Limit: p.Limit, Window: p.Window}
	if algo == engine.GCRA && p.Window/time.Duration(p.Limit) < gcraMinInterval {
		cfg.Limit = max(1, int(p.Window/gcraMinInterval))
		cfg.Burst = engine.MaxGCRALimit
	}
	return cfg
}

// Size formats n the way benchmark names spell it: 1k, 100k, 1M, 10M.
func Size(n int) string {
	switch {
	case n >= 1_000_000 && n%1_000_000 == 0:
		return strconv.Itoa(n/1_000_000) + "M"
	case n >= 1_000 && n%1_000 == 0:
		return strconv.Itoa(n/1_000) + "k"
	}
	return strconv.Itoa(n)
}

var (
	mu   sync.Mutex
	sets = map[string][]string{}
	seqs = map[string][]uint32{}
)

// Keys returns n distinct keys prefix+"0" ... prefix+strconv.Itoa(n-1).
// The slice is shared: do not modify it.
func Keys(n int) []string { return KeysWithPrefix("k", n) }

// KeysWithPrefix is Keys with another prefix, for key sets that must be
// disjoint from Keys (never-seen keys).
func KeysWithPrefix(prefix string, n int) []string {
	if n <= 0 {
		return nil
	}
	id := prefix + "/" + strconv.Itoa(n)
	mu.Lock()
	defer mu.Unlock()
	if s, ok := sets[id]; ok {
		return s
	}
	var sb strings.Builder
	sb.Grow(n * (len(prefix) + len(strconv.Itoa(n))))
	ends := make([]int, n)
	var buf [20]byte
	for i := range n {
		sb.WriteString(prefix)
		sb.Write(strconv.AppendInt(buf[:0], int64(i), 10))
		ends[i] = sb.Len()
	}
	all := sb.String()
	keys := make([]string, n)
	start := 0
	for i, end := range ends {
		// Substrings share all's bytes: no allocation per key.
		keys[i] = all[start:end]
		start = end
	}
	sets[id] = keys
	return keys
}

// SeqLen is the length of the sequence Sequence returns for n keys: a power
// of two, at least 2^20 and at least n up to 2^22, so that uniform access
// to a large set visits most keys before repeating.
func SeqLen(n int) int {
	l := 1 << 20
	for l < n && l < 1<<22 {
		l <<= 1
	}
	return l
}

// Sequence returns SeqLen(n) key indexes in [0, n) drawn from d with a
// fixed seed. The slice is shared: do not modify it.
func Sequence(n int, d Dist) []uint32 {
	if n <= 0 {
		panic(fmt.Sprintf("keyset: Sequence of %d keys", n))
	}
	id := string(d) + "/" + strconv.Itoa(n)
	mu.Lock()
	defer mu.Unlock()
	if s, ok := seqs[id]; ok {
		return s
	}
	r := rand.New(rand.NewPCG(0x5eed, uint64(n)))
	s := make([]uint32, SeqLen(n))
	switch d {
	case Uniform:
		for i := range s {
			s[i] = uint32(r.IntN(n))
		}
	case Zipf:
		z := rand.NewZipf(r, ZipfS, 1, uint64(n-1))
		for i := range s {
			s[i] = uint32(z.Uint64())
		}
	default:
		panic(fmt.Sprintf("keyset: unknown distribution %q", d))
	}
	seqs[id] = s
	return s
}

// Drop releases every cached key set and sequence, so that a benchmark of
// a large set does not keep its memory for the ones after it.
func Drop() {
	mu.Lock()
	defer mu.Unlock()
	clear(sets)
	clear(seqs)
}

// Capacity is the key bound a bounded store gets to hold keys existing
// keys: a quarter more plus 4096, because a sharded table fills its shards
// unevenly (balls into bins) and a key it cannot place would turn an
// "existing keys" benchmark into a measurement of the overflow path.
func Capacity(keys int) int { return keys + keys/4 + 4096 }
