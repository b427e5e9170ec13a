package peers

import (
	"flag"
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/slidelimit/slidelimit/bench/keyset"
	"github.com/slidelimit/slidelimit/bench/measure"
)

var implFilter = flag.String("peers.impl", os.Getenv("SLIDELIMIT_PEERS_IMPL"),
	"run only implementations whose name contains this string (default from SLIDELIMIT_PEERS_IMPL)")

// impls returns the implementations to run, ours first.
func impls() []Impl {
	var out []Impl
	for _, im := range Impls() {
		if *implFilter == "" || strings.Contains(im.Name, *implFilter) {
			out = append(out, im)
		}
	}
	return out
}

// implsWith returns the implementations whose limiter has capability has
// (AllowN, Peek): the others get no sub-benchmark rather than a skip.
func implsWith(b *testing.B, has func(Limiter) bool) []Impl {
	var out []Impl
	for _, im := range impls() {
		l, err := im.New(keyset.HotDenied, 0)
		if err != nil {
			b.Fatalf("%s: %v", im.Name, err)
		}
		if has(l) {
			out = append(out, im)
		}
		l.Close()
	}
	return out
}

func hasAllowN(l Limiter) bool { _, ok := l.(AllowNer); return ok }
func hasPeek(l Limiter) bool   { _, ok := l.(Peeker); return ok }

// build makes a limiter and closes it when b ends. A collection first, so
// that the previous implementation's garbage is not charged to this one.
func build(b *testing.B, im Impl, p keyset.Profile, keys int) Limiter {
	b.Helper()
	runtime.GC()
	l, err := im.New(p, keys)
	if err != nil {
		b.Fatalf("%s: %v", im.Name, err)
	}
	b.Cleanup(l.Close)
	return l
}

// BenchmarkAllow is the engine suite's BenchmarkAllow on every
// implementation: one hot key allowed or denied, and existing keys with
// uniform and Zipf access. Names: BenchmarkAllow/<scenario>/impl=<name>.
func BenchmarkAllow(b *testing.B) {
	for _, sc := range []struct {
		name string
		p    keyset.Profile
	}{{"hot=allowed", keyset.HotAllowed}, {"hot=denied", keyset.HotDenied}} {
		b.Run(sc.name, func(b *testing.B) {
			for _, im := range impls() {
				b.Run("impl="+im.Name, func(b *testing.B) {
					l := build(b, im, sc.p, 0)
					if sc.p == keyset.HotDenied {
						for range sc.p.Limit {
							l.Allow("hot")
						}
					}
					b.ReportAllocs()
					allowed := 0
					for b.Loop() {
						if l.Allow("hot") {
							allowed++
						}
					}
					measure.ReportAllowed(b, allowed)
				})
			}
		})
	}
	sizes := []int{1_000, 100_000, 1_000_000}
	if testing.Short() {
		sizes = sizes[:2] // the CI smoke run: 100k covers 1M's code paths
	}
	for _, n := range sizes {
		b.Run("keys="+keyset.Size(n), func(b *testing.B) {
			for _, d := range []keyset.Dist{keyset.Uniform, keyset.Zipf} {
				b.Run(string(d), func(b *testing.B) {
					for _, im := range impls() {
						b.Run("impl="+im.Name, func(b *testing.B) { benchKeys(b, im, n, d) })
					}
				})
			}
		})
	}
}

// BenchmarkAllowLimit is BenchmarkAllow's existing-key scenario at larger
// limits (100k keys, uniform access), where a sliding log's state grows
// with the limit: 16 (4 cache lines of ticks per key) and 100. Names:
// BenchmarkAllowLimit/limit=<L>/keys=100k/uniform/impl=<name>.
func BenchmarkAllowLimit(b *testing.B) {
	const n = 100_000
	for _, limit := range []int{16, 100} {
		p := keyset.Keyed
		p.Limit = limit
		b.Run(fmt.Sprintf("limit=%d/keys=%s/uniform", limit, keyset.Size(n)), func(b *testing.B) {
			for _, im := range impls() {
				b.Run("impl="+im.Name, func(b *testing.B) { benchKeysProfile(b, im, n, keyset.Uniform, p) })
			}
		})
	}
}

// benchKeys populates n keys and runs distribution d over them. The
// population (and its heap figures) is rebuilt per distribution so that
// each sub-benchmark stands alone and only one implementation's key state
// is live at a time.
func benchKeys(b *testing.B, im Impl, n int, d keyset.Dist) {
	benchKeysProfile(b, im, n, d, keyset.Keyed)
}

func benchKeysProfile(b *testing.B, im Impl, n int, d keyset.Dist, p keyset.Profile) {
	keys := keyset.Keys(n)
	seq := keyset.Sequence(n, d)
	before := measure.Take()
	l := build(b, im, p, n)
	for _, k := range keys {
		l.Allow(k)
	}
	tracked := -1
	if t, ok := l.(Tracker); ok {
		tracked = t.Tracked(keys)
	}
	pk := measure.Since(before, n)
	mask := len(seq) - 1
	b.ReportAllocs()
	allowed, i := 0, 0
	for b.Loop() {
		if l.Allow(keys[seq[i&mask]]) {
			allowed++
		}
		i++
	}
	measure.ReportAllowed(b, allowed)
	measure.ReportPerKey(b, pk)
	if tracked >= 0 {
		b.ReportMetric(float64(tracked)/float64(n), "tracked/key")
	}
}

// BenchmarkAllowParallel: RunParallel over 100k keys, and on one hot key.
func BenchmarkAllowParallel(b *testing.B) {
	const n = 100_000
	b.Run("distinct", func(b *testing.B) {
		for _, im := range impls() {
			b.Run("impl="+im.Name, func(b *testing.B) {
				keys := keyset.Keys(n)
				seq := keyset.Sequence(n, keyset.Uniform)
				l := build(b, im, keyset.Keyed, n)
				for _, k := range keys {
					l.Allow(k)
				}
				measure.RunParallel(b, func(g, i int) bool { return l.Allow(keys[seq[(g<<16+i)&(len(seq)-1)]]) })
			})
		}
	})
	b.Run("hotkey", func(b *testing.B) {
		for _, im := range impls() {
			b.Run("impl="+im.Name, func(b *testing.B) {
				l := build(b, im, keyset.HotAllowed, 0)
				measure.RunParallel(b, func(int, int) bool { return l.Allow("hot") })
			})
		}
	})
}

// BenchmarkAllowN runs batches of 4 on the implementations that take n.
func BenchmarkAllowN(b *testing.B) {
	const n, batch = 100_000, 4
	b.Run("n=4/hot=allowed", func(b *testing.B) {
		for _, im := range implsWith(b, hasAllowN) {
			b.Run("impl="+im.Name, func(b *testing.B) {
				l := build(b, im, keyset.HotAllowed, 0).(AllowNer)
				b.ReportAllocs()
				allowed := 0
				for b.Loop() {
					if l.AllowN("hot", batch) {
						allowed++
					}
				}
				measure.ReportAllowed(b, allowed)
			})
		}
	})
	b.Run("n=4/keys=100k/uniform", func(b *testing.B) {
		for _, im := range implsWith(b, hasAllowN) {
			b.Run("impl="+im.Name, func(b *testing.B) {
				keys := keyset.Keys(n)
				seq := keyset.Sequence(n, keyset.Uniform)
				base := build(b, im, keyset.Keyed, n)
				l := base.(AllowNer)
				for _, k := range keys {
					base.Allow(k)
				}
				mask := len(seq) - 1
				b.ReportAllocs()
				allowed, i := 0, 0
				for b.Loop() {
					if l.AllowN(keys[seq[i&mask]], batch) {
						allowed++
					}
					i++
				}
				measure.ReportAllowed(b, allowed)
			})
		}
	})
}

// peekProfile is Keyed with a Window no run outlasts. Nothing consumes
// during BenchmarkPeek, so with Keyed's 10 ms every key would be idle 20 ms
// after the population step and the rest of the run would peek state that
// has expired: an implementation whose windows move on globally (httprate)
// then answers from one time comparison, reading no key at all. A gateway
// peeks clients that are live, so the keys stay in their window here.
var peekProfile = keyset.Profile{Limit: keyset.Keyed.Limit, Window: time.Hour}

// BenchmarkPeek answers without consuming, on the implementations that
// can, for keys whose state is live (peekProfile).
func BenchmarkPeek(b *testing.B) {
	const n = 100_000
	b.Run("keys=100k/uniform", func(b *testing.B) {
		for _, im := range implsWith(b, hasPeek) {
			b.Run("impl="+im.Name, func(b *testing.B) {
				keys := keyset.Keys(n)
				seq := keyset.Sequence(n, keyset.Uniform)
				base := build(b, im, peekProfile, n)
				l := base.(Peeker)
				for _, k := range keys {
					base.Allow(k)
				}
				mask := len(seq) - 1
				b.ReportAllocs()
				allowed, i := 0, 0
				for b.Loop() {
					if l.Peek(keys[seq[i&mask]]) {
						allowed++
					}
					i++
				}
				measure.ReportAllowed(b, allowed)
			})
		}
	})
}

// BenchmarkNewKeys streams never-seen keys. Bounded implementations
// (slidelimit, ristretto) hold about keyset.Capacity(64k) = 86k keys; the others keep growing,
// which is their behaviour until their own sweep runs.
func BenchmarkNewKeys(b *testing.B) {
	const bound = 1 << 16
	fresh := keyset.KeysWithPrefix("n", 1<<21)
	for _, im := range impls() {
		b.Run("impl="+im.Name, func(b *testing.B) {
			l := build(b, im, keyset.Keyed, bound)
			mask := len(fresh) - 1
			b.ReportAllocs()
			allowed, i := 0, 0
			for b.Loop() {
				if l.Allow(fresh[i&mask]) {
					allowed++
				}
				i++
			}
			measure.ReportAllowed(b, allowed)
		})
	}
}
