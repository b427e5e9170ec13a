package bench

import (
	"bytes"
	"flag"
	"io"
	"os"
	"testing"
	"time"

	"github.com/slidelimit/slidelimit/bench/keyset"
	"github.com/slidelimit/slidelimit/bench/measure"
	"github.com/slidelimit/slidelimit/engine"
)

var big = flag.Bool("bench.big", os.Getenv("SLIDELIMIT_BENCH_BIG") != "",
	"also run the 10M-key scenarios (about 2 GB of memory; default from SLIDELIMIT_BENCH_BIG)")

// algos is every engine algorithm (engine.Algorithms: log, counter, gcra),
// so a new one joins every scenario of the suite.
var algos = engine.Algorithms()

// sizes are the existing-key populations: 1M not under -short (the CI
// smoke run, whose code paths 100k already covers), 10M only when asked for.
func sizes() []int {
	s := []int{1_000, 100_000}
	if !testing.Short() {
		s = append(s, 1_000_000)
	}
	if *big {
		s = append(s, 10_000_000)
	}
	return s
}

// newLimiter builds an engine for profile p. keys > 0 sets MaxKeys to
// keyset.Capacity(keys) and MaxMemory far above what the keys need, so
// that the population is tracked, not reclaimed or overflowed.
func newLimiter(b *testing.B, algo engine.Algorithm, p keyset.Profile, keys int) *engine.Limiter {
	b.Helper()
	cfg := p.EngineConfig(algo)
	if keys > 0 {
		cfg.MaxKeys = keyset.Capacity(keys)
		cfg.MaxMemory = int64(cfg.MaxKeys)*1024 + 256<<20
		// No sweep during the run: with the short Keyed window every key is
		// idle by the time the population ends, and a sweep would turn
		// "existing keys" back into new ones.
		cfg.SweepInterval = time.Hour
	}
	lim, err := engine.New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = lim.Close() })
	return lim
}

// populate makes every key known to lim and fails the benchmark if the
// engine did not keep them all: an "existing keys" benchmark over keys the
// engine dropped would measure the overflow path instead.
func populate(b *testing.B, lim *engine.Limiter, keys []string) {
	b.Helper()
	for _, k := range keys {
		lim.Allow(k)
	}
	if got := lim.Len(); got < len(keys) {
		b.Fatalf("engine tracks %d of %d keys after populating (Stats: %+v); raise MaxKeys/MaxMemory in newLimiter", got, len(keys), lim.Stats())
	}
}

func BenchmarkAllow(b *testing.B) {
	for _, algo := range algos {
		b.Run(algo.String(), func(b *testing.B) {
			b.Run("hot=allowed", func(b *testing.B) { benchHot(b, algo, keyset.HotAllowed) })
			b.Run("hot=denied", func(b *testing.B) { benchHot(b, algo, keyset.HotDenied) })
			for _, n := range sizes() {
				b.Run("keys="+keyset.Size(n), func(b *testing.B) { benchKeys(b, algo, n) })
			}
		})
	}
}

func benchHot(b *testing.B, algo engine.Algorithm, p keyset.Profile) {
	lim := newLimiter(b, algo, p, 0)
	if p == keyset.HotDenied {
		for range p.Limit {
			lim.Allow("hot")
		}
	}
	b.ReportAllocs()
	allowed := 0
	for b.Loop() {
		if lim.Allow("hot") {
			allowed++
		}
	}
	measure.ReportAllowed(b, allowed)
}

// benchKeys populates n keys once and runs each access distribution over
// the same limiter, so that the population cost is paid once per count.
func benchKeys(b *testing.B, algo engine.Algorithm, n int) {
	keys := keyset.Keys(n)
	dists := []keyset.Dist{keyset.Uniform, keyset.Zipf}
	for _, d := range dists {
		keyset.Sequence(n, d) // built before the heap snapshot: not the limiter's
	}
	before := measure.Take()
	lim := newLimiter(b, algo, keyset.Keyed, n)
	populate(b, lim, keys)
	pk := measure.Since(before, n)
	for _, d := range dists {
		b.Run(string(d), func(b *testing.B) {
			seq := keyset.Sequence(n, d)
			mask := len(seq) - 1
			b.ReportAllocs()
			allowed, i := 0, 0
			for b.Loop() {
				if lim.Allow(keys[seq[i&mask]]) {
					allowed++
				}
				i++
			}
			measure.ReportAllowed(b, allowed)
			measure.ReportPerKey(b, pk)
		})
	}
	if n >= 10_000_000 {
		keyset.Drop() // 10M keys and their sequences: give the memory back
	}
}

// BenchmarkAllowMany decides batches of 64 keys drawn uniformly from an
// existing population with one AllowMany call each; ns/key is comparable
// with BenchmarkAllow's ns/op on the same keys (the gain is the overlap of
// the keys' cache misses).
func BenchmarkAllowMany(b *testing.B) {
	const batch = 64
	for _, algo := range algos {
		b.Run(algo.String(), func(b *testing.B) {
			for _, n := range sizes() {
				if n < 100_000 {
					continue
				}
				b.Run("keys="+keyset.Size(n)+"/uniform/batch=64", func(b *testing.B) {
					keys := keyset.Keys(n)
					seq := keyset.Sequence(n, keyset.Uniform)
					lim := newLimiter(b, algo, keyset.Keyed, n)
					populate(b, lim, keys)
					mask := len(seq) - 1
					group := make([]string, batch)
					dst := make([]bool, 0, batch)
					b.ReportAllocs()
					allowed, i := 0, 0
					for b.Loop() {
						for j := range group {
							group[j] = keys[seq[(i+j)&mask]]
						}
						i += batch
						dst = lim.AllowMany(dst[:0], group)
						for _, ok := range dst {
							if ok {
								allowed++
							}
						}
					}
					b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(max(b.N, 1)*batch), "ns/key")
					b.ReportMetric(float64(allowed)/float64(max(b.N, 1)*batch), "allowed/key")
				})
			}
		})
	}
}

func BenchmarkAllowParallel(b *testing.B) {
	const n = 100_000
	for _, algo := range algos {
		b.Run(algo.String(), func(b *testing.B) {
			b.Run("distinct", func(b *testing.B) {
				keys := keyset.Keys(n)
				seq := keyset.Sequence(n, keyset.Uniform)
				lim := newLimiter(b, algo, keyset.Keyed, n)
				populate(b, lim, keys)
				measure.RunParallel(b, func(g, i int) bool {
					// Each goroutine walks the sequence from its own offset.
					return lim.Allow(keys[seq[(g<<16+i)&(len(seq)-1)]])
				})
			})
			b.Run("hotkey", func(b *testing.B) {
				lim := newLimiter(b, algo, keyset.HotAllowed, 0)
				measure.RunParallel(b, func(int, int) bool { return lim.Allow("hot") })
			})
		})
	}
}

func BenchmarkAllowN(b *testing.B) {
	const n, batch = 100_000, 4
	for _, algo := range algos {
		b.Run(algo.String()+"/n=4", func(b *testing.B) {
			b.Run("hot=allowed", func(b *testing.B) {
				lim := newLimiter(b, algo, keyset.HotAllowed, 0)
				b.ReportAllocs()
				allowed := 0
				for b.Loop() {
					if lim.AllowN("hot", batch).Allowed {
						allowed++
					}
				}
				measure.ReportAllowed(b, allowed)
			})
			b.Run("keys=100k/uniform", func(b *testing.B) {
				keys := keyset.Keys(n)
				seq := keyset.Sequence(n, keyset.Uniform)
				// Limit 8 admits two batches of 4 per window.
				lim := newLimiter(b, algo, keyset.Keyed, n)
				populate(b, lim, keys)
				mask := len(seq) - 1
				b.ReportAllocs()
				allowed, i := 0, 0
				for b.Loop() {
					if lim.AllowN(keys[seq[i&mask]], batch).Allowed {
						allowed++
					}
					i++
				}
				measure.ReportAllowed(b, allowed)
			})
		})
	}
}

func BenchmarkPeek(b *testing.B) {
	const n = 100_000
	for _, algo := range algos {
		b.Run(algo.String(), func(b *testing.B) {
			b.Run("hot=denied", func(b *testing.B) {
				lim := newLimiter(b, algo, keyset.HotDenied, 0)
				for range keyset.HotDenied.Limit {
					lim.Allow("hot")
				}
				b.ReportAllocs()
				allowed := 0
				for b.Loop() {
					if lim.Peek("hot").Allowed {
						allowed++
					}
				}
				measure.ReportAllowed(b, allowed)
			})
			b.Run("keys=100k/uniform", func(b *testing.B) {
				keys := keyset.Keys(n)
				seq := keyset.Sequence(n, keyset.Uniform)
				lim := newLimiter(b, algo, keyset.Keyed, n)
				populate(b, lim, keys)
				mask := len(seq) - 1
				b.ReportAllocs()
				allowed, i := 0, 0
				for b.Loop() {
					if lim.Peek(keys[seq[i&mask]]).Allowed {
						allowed++
					}
					i++
				}
				measure.ReportAllowed(b, allowed)
			})
		})
	}
}

// BenchmarkNewKeys sends a stream of never-seen keys at an engine bounded
// to 64k keys: once the bound is reached, each new key is tracked by
// reclaiming an idle one or decided untracked (Config.Overflow). The
// reclaimed/op and overflow/op metrics say which path ran.
func BenchmarkNewKeys(b *testing.B) {
	const bound = 1 << 16
	fresh := keyset.KeysWithPrefix("n", 1<<21)
	for _, algo := range algos {
		b.Run(algo.String()+"/bound=64k", func(b *testing.B) {
			lim, err := engine.New(engine.Config{Algorithm: algo, Limit: keyset.Keyed.Limit, Window: keyset.Keyed.Window, MaxKeys: bound})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = lim.Close() })
			mask := len(fresh) - 1
			b.ReportAllocs()
			allowed, i := 0, 0
			start := lim.Stats()
			for b.Loop() {
				if lim.Allow(fresh[i&mask]) {
					allowed++
				}
				i++
			}
			end := lim.Stats()
			measure.ReportAllowed(b, allowed)
			ops := float64(max(b.N, 1))
			b.ReportMetric(float64(end.Reclaimed-start.Reclaimed)/ops, "reclaimed/op")
			b.ReportMetric(float64(end.Overflow-start.Overflow)/ops, "overflow/op")
			b.ReportMetric(float64(lim.Len()), "keys")
		})
	}
}

// BenchmarkSnapshot writes (WriteTo, to io.Discard) and restores (ReadFrom
// into a new Limiter, whose New is not timed) a SlidingCounter snapshot of
// n existing keys: 100k by default, 10M with -bench.big (the target: about
// 1 s each on the 2-core machine). The window is an hour, so
// no key is idle and every one is written and restored. ns/key and
// MB/s say the rate; allocs/op stays flat with n (nothing per key).
func BenchmarkSnapshot(b *testing.B) {
	ns := []int{100_000}
	if *big {
		ns = append(ns, 10_000_000)
	}
	for _, n := range ns {
		cfg := engine.Config{Algorithm: engine.SlidingCounter, Limit: 100, Window: time.Hour,
			MaxKeys: keyset.Capacity(n), MaxMemory: int64(keyset.Capacity(n))*64 + 256<<20, SweepInterval: time.Hour}
		lim, err := engine.New(cfg)
		if err != nil {
			b.Fatal(err)
		}
		for _, k := range keyset.Keys(n) {
			lim.Allow(k)
		}
		keyset.Drop()
		var snap bytes.Buffer
		if _, err := lim.WriteTo(&snap); err != nil {
			b.Fatal(err)
		}
		b.Run("write/keys="+keyset.Size(n), func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(snap.Len()))
			for b.Loop() {
				if _, err := lim.WriteTo(io.Discard); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/key")
		})
		b.Run("read/keys="+keyset.Size(n), func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(snap.Len()))
			for b.Loop() {
				b.StopTimer()
				y, err := engine.New(cfg)
				if err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				if _, err := y.ReadFrom(bytes.NewReader(snap.Bytes())); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				if y.Len() != n {
					b.Fatalf("restored %d of %d keys", y.Len(), n)
				}
				_ = y.Close()
				b.StartTimer()
			}
			// Elapsed counts only the timed ReadFrom calls.
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/key")
		})
		_ = lim.Close()
	}
}
