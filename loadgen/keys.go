package loadgen

import (
	"math/rand/v2"
	"strconv"
)

// keySpace holds Keys fixed-width keys ("k0000042") back to back in one
// string, so key i is a substring: drawing a key allocates nothing and the
// whole key space is one pointer-free object for the garbage collector.
type keySpace struct {
	all   string
	width int
}

func newKeySpace(n int) keySpace {
	digits := len(strconv.Itoa(n - 1))
	width := 1 + digits
	buf := make([]byte, 0, n*width)
	for i := 0; i < n; i++ {
		buf = append(buf, 'k')
		s := strconv.Itoa(i)
		for j := len(s); j < digits; j++ {
			buf = append(buf, '0')
		}
		buf = append(buf, s...)
	}
	return keySpace{all: string(buf), width: width}
}

func (k keySpace) key(i int) string { return k.all[i*k.width : (i+1)*k.width] }

// hotKey is the key of the HotKey distribution and of Mix's hot share; it
// is outside the key space (no "k" prefix).
const hotKey = "hot"

// keyGen draws one sender's key stream. It is not safe for concurrent use:
// each sender owns one, seeded from Config.Seed and the sender's index.
type keyGen struct {
	dist   Distribution
	space  keySpace
	n      int
	rng    *rand.Rand
	zipf   *rand.Zipf
	attack []byte // "a<sender>-" prefix followed by the counter's digits
	prefix int
	seq    uint64
}

func newKeyGen(c Config, space keySpace, sender int) *keyGen {
	g := &keyGen{dist: c.Dist, space: space, n: c.Keys}
	g.rng = rand.New(rand.NewPCG(c.Seed, uint64(sender)+1))
	if c.Dist.usesZipf() {
		g.zipf = rand.NewZipf(g.rng, c.ZipfS, 1, uint64(c.Keys-1))
	}
	g.attack = append(g.attack, 'a')
	g.attack = strconv.AppendInt(g.attack, int64(sender), 10)
	g.attack = append(g.attack, '-')
	g.prefix = len(g.attack)
	return g
}

// next returns the next key. Only attack keys allocate (a fresh string per
// request, which a limiter must copy or keep anyway).
func (g *keyGen) next() string {
	switch g.dist {
	case Uniform:
		return g.space.key(g.rng.IntN(g.n))
	case Zipf:
		return g.space.key(int(g.zipf.Uint64()))
	case HotKey:
		return hotKey
	case Attack:
		return g.attackKey()
	default: // Mix
		switch r := g.rng.IntN(100); {
		case r < 5:
			return hotKey
		case r < 10:
			return g.attackKey()
		default:
			return g.space.key(int(g.zipf.Uint64()))
		}
	}
}

// attackKey returns a key no sender has produced before in this run: the
// sender index in the prefix keeps senders' streams disjoint.
func (g *keyGen) attackKey() string {
	g.seq++
	g.attack = strconv.AppendUint(g.attack[:g.prefix], g.seq, 10)
	return string(g.attack)
}
