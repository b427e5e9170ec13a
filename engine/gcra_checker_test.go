package engine

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// The GCRA checker: goroutines race AllowNAt on a few hot keys, at times
// behind and at the clock (frozen, or moved by another goroutine), each
// call logged with its place in real time (a global sequence number taken
// before the call and after it returns). Every decision reports the TAT it
// left (ResetAfter = TAT - its time, on the identity virtual clock), so
// the log rebuilds each key's sequence of words offline, and the check is
// that this sequence is one the sequential reference admits:
//
//   - every write raises the word, and no two writes leave the same word
//     (an admission counted twice or lost would break the chain);
//   - each writer's base is max(previous word, its time), and it was
//     admitted iff base + n x Token - time <= Depth (penalty writes:
//     capped at time + 2 x Depth);
//   - each denial that wrote nothing saw a word of the chain that denies it;
//   - real time: an op that saw word k overlaps the span in which word k
//     was the key's (after its writer started, before the next writer
//     ended).

type gcraOp struct {
	key, n     int
	rel        int64
	start, end uint64
	d          Decision
}

func TestGCRACheckerMatchesSequentialReference(t *testing.T) {
	run := 200 * time.Millisecond
	if testing.Short() {
		run = 60 * time.Millisecond
	}
	for _, moving := range []bool{false, true} {
		for _, pen := range []bool{false, true} {
			t.Run(fmt.Sprintf("moving=%v/penalty=%v", moving, pen), func(t *testing.T) {
				runGCRAChecker(t, moving, pen, run)
			})
		}
	}
}

func runGCRAChecker(t *testing.T, moving, penalty bool, run time.Duration) {
	const (
		hot    = 4
		limit  = 4
		burst  = 3
		window = time.Millisecond
	)
	clk := &fakeClock{}
	clk.t.Store(int64(time.Hour))
	l := newLimiter(t, Config{Algorithm: GCRA, Limit: limit, Burst: burst, Window: window, Penalty: penalty,
		Clock: clk, SweepInterval: MaxWindow})
	epoch := clk.Now()
	tok := int64(window) / limit
	depth := burst * tok
	var seq atomic.Uint64
	var stop atomic.Bool
	var wg sync.WaitGroup
	if moving {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(9, 9))
			for !stop.Load() {
				clk.t.Add(rng.Int64N(tok / 2))
				runtime.Gosched()
			}
		}()
	}
	workers := 4
	logs := make([][]gcraOp, workers)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 22))
			for len(logs[w]) < 50000 && !stop.Load() {
				o := gcraOp{key: rng.IntN(hot), n: 1 + rng.IntN(2)}
				now := clk.Now()
				if rng.IntN(4) == 0 {
					now -= rng.Int64N(2 * tok) // a late time
				}
				o.rel = max(0, now-epoch) // the engine counts a time before its epoch at the epoch
				o.start = seq.Add(1)
				o.d = l.AllowNAt(fmt.Sprint("hot-", o.key), o.n, Time(now))
				o.end = seq.Add(1)
				logs[w] = append(logs[w], o)
			}
		}()
	}
	time.Sleep(run)
	stop.Store(true)
	wg.Wait()
	var all []gcraOp
	for _, lg := range logs {
		all = append(all, lg...)
	}
	var bad []string
	admitted := 0
	for k := 0; k < hot; k++ {
		var ops []gcraOp
		for _, o := range all {
			if o.key == k {
				ops = append(ops, o)
				if o.d.Allowed {
					admitted++
				}
			}
		}
		bad = append(bad, checkGCRAKey(k, ops, tok, depth, penalty)...)
	}
	t.Logf("%d decisions on %d hot keys, %d admitted", len(all), hot, admitted)
	if len(bad) > 0 {
		if len(bad) > 10 {
			bad = append(bad[:10], fmt.Sprintf("... and %d more", len(bad)-10))
		}
		t.Fatalf("%d mismatches with the sequential reference:\n%s", len(bad), strings.Join(bad, "\n"))
	}
}

// checkGCRAKey checks one key's log (see the checker's doc).
func checkGCRAKey(k int, ops []gcraOp, tok, depth int64, penalty bool) []string {
	var bad []string
	fail := func(f string, a ...any) { bad = append(bad, fmt.Sprintf("hot-%d: ", k)+fmt.Sprintf(f, a...)) }
	if len(ops) == 0 {
		return nil
	}
	after := func(o gcraOp) int64 { return o.rel + int64(o.d.ResetAfter) }
	// Group by the word each op left; find each word's writer.
	byWord := map[int64][]int{}
	for i, o := range ops {
		byWord[after(o)] = append(byWord[after(o)], i)
	}
	words := make([]int64, 0, len(byWord))
	for w := range byWord {
		words = append(words, w)
	}
	sort.Slice(words, func(i, j int) bool { return words[i] < words[j] })
	writer := make([]int, len(words))
	// The span in which a word was the key's runs from its writer's start
	// to the next writer's end; when a penalty word has several possible
	// writers (denials at one time, one wrote and the others saw it), the
	// span is widened to cover every candidate, which keeps the check sound.
	wStart := make([]uint64, len(words))
	wEnd := make([]uint64, len(words))
	for wi, w := range words {
		writer[wi] = -1
		for _, i := range byWord[w] {
			o := ops[i]
			if o.d.Allowed {
				if writer[wi] >= 0 {
					fail("two admissions left the same word %d (%+v and %+v)", w, ops[writer[wi]], o)
				}
				writer[wi] = i
				wStart[wi], wEnd[wi] = o.start, o.end
			}
		}
		if writer[wi] < 0 {
			if !penalty || wi == 0 {
				fail("word %d was left by denials only (penalty %v): %v", w, penalty, byWord[w])
				continue
			}
			// A penalty write: its writer is the denial that, from the
			// previous word, leaves this one (the others saw it).
			prev := words[wi-1]
			for _, i := range byWord[w] {
				o := ops[i]
				if min(max(prev, o.rel)+int64(o.n)*tok, o.rel+2*depth) != w {
					continue
				}
				if writer[wi] < 0 {
					writer[wi], wStart[wi], wEnd[wi] = i, o.start, o.end
				}
				wStart[wi], wEnd[wi] = min(wStart[wi], o.start), max(wEnd[wi], o.end)
			}
			if writer[wi] < 0 {
				fail("no denial leaves word %d from word %d: %v", w, prev, byWord[w])
			}
		}
	}
	if len(bad) > 0 {
		return bad
	}
	for wi, w := range words {
		wr := ops[writer[wi]]
		if wi == 0 {
			// The key's creation: counts at the later of its time and the
			// clock, on a full bucket, and is admitted.
			if !wr.d.Allowed || w-int64(wr.n)*tok < wr.rel {
				fail("first word %d from %+v", w, wr)
			}
		} else {
			prev := words[wi-1]
			base := max(prev, wr.rel)
			next := base + int64(wr.n)*tok
			ok := next-wr.rel <= depth
			want := next
			if !ok {
				want = min(next, wr.rel+2*depth)
			}
			if ok != wr.d.Allowed || want != w {
				fail("writer of word %d (%+v, time %d, n %d) after word %d: reference admits=%v and leaves %d", w, wr.d, wr.rel, wr.n, prev, ok, want)
			}
			if wEnd[wi] < wStart[wi-1] {
				fail("word %d written (ended %d) before the word it replaced was (started %d)", w, wEnd[wi], wStart[wi-1])
			}
		}
		rem := max(0, (depth-(w-wr.rel))/tok)
		if wi == 0 {
			// The creation counts at the later of its time and the clock
			// (a late time's key is dated at the clock), on a full bucket:
			// what remains is the bucket less its n.
			rem = depth/tok - int64(wr.n)
		}
		if int64(wr.d.Remaining) != rem {
			fail("writer of word %d (%+v, time %d, n %d, candidates %d): Remaining %d, reference %d", w, wr.d, wr.rel, wr.n, len(byWord[w]), wr.d.Remaining, rem)
		}
		// Every other op of the group saw the word and wrote nothing.
		for _, i := range byWord[w] {
			if i == writer[wi] {
				continue
			}
			o := ops[i]
			if o.d.Allowed {
				continue // reported above
			}
			if base := max(w, o.rel); base+int64(o.n)*tok-o.rel <= depth {
				fail("denial %+v (time %d, n %d) saw word %d, which admits it", o.d, o.rel, o.n, w)
			}
			if penalty && min(max(w, o.rel)+int64(o.n)*tok, o.rel+2*depth) > w {
				fail("penalty denial %+v (time %d) saw word %d and wrote nothing", o.d, o.rel, w)
			}
			if o.end < wStart[wi] || (wi+1 < len(words) && o.start > wEnd[wi+1]) {
				fail("denial (seq %d-%d) saw word %d outside the span it was the key's", o.start, o.end, w)
			}
			if want := max(0, w+int64(o.n)*tok-depth-o.rel); int64(o.d.RetryAfter) != want {
				fail("denial RetryAfter %v, reference %v", o.d.RetryAfter, time.Duration(want))
			}
		}
	}
	return bad
}
