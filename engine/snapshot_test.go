package engine

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// snapConfigs is one Config per algorithm, on clock clk, small enough that
// a trace fills a key's window.
func snapConfigs(clk Clock) []Config {
	return []Config{
		{Algorithm: SlidingLog, Limit: 5, Window: time.Second, Clock: clk, Shards: 4, MaxKeys: 1000},
		{Algorithm: SlidingCounter, Limit: 5, Window: time.Second, Clock: clk, Shards: 4, MaxKeys: 1000},
		{Algorithm: GCRA, Limit: 5, Window: time.Second, Clock: clk, Shards: 4, MaxKeys: 1000},
	}
}

// snapTrace runs a random trace on l from clock time from for n steps of
// up to 50 ms each, over keys k0..k39, and returns the decisions.
func snapTrace(l *Limiter, clk *fakeClock, r *rand.Rand, n int) []bool {
	out := make([]bool, 0, n)
	for range n {
		clk.t.Add(int64(r.IntN(50)) * int64(time.Millisecond))
		k := "k" + strconv.Itoa(r.IntN(8))
		switch r.IntN(4) {
		case 0:
			out = append(out, l.AllowN(k, 1+r.IntN(2)).Allowed)
		default:
			out = append(out, l.Allow(k))
		}
	}
	return out
}

// A limiter restored from a snapshot decides every later request as the
// limiter it was taken from does, given the same wall-clock gap between
// the write and the restore (differential: 0 mismatches), for every
// algorithm, whatever the two clocks read.
func TestSnapshotRestoreDecidesLikeTheLimiterThatNeverStopped(t *testing.T) {
	for _, gap := range []time.Duration{0, 300 * time.Millisecond, 1700 * time.Millisecond} {
		for i := range snapConfigs(nil) {
			cx, cy := &fakeClock{}, &fakeClock{}
			cx.t.Store(int64(5 * time.Hour))
			cy.t.Store(int64(3 * time.Second)) // the new process's clock has another origin
			x, y := newLimiter(t, snapConfigs(cx)[i]), newLimiter(t, snapConfigs(cy)[i])
			name := fmt.Sprintf("%v/gap=%v", x.Config().Algorithm, gap)
			seed := uint64(i)*7 + uint64(gap)
			snapTrace(x, cx, rand.New(rand.NewPCG(seed, 1)), 600)
			wall := int64(1_700_000_000) * int64(time.Second)
			x.wall = func() int64 { return wall }
			var buf bytes.Buffer
			if _, err := x.WriteTo(&buf); err != nil {
				t.Fatalf("%s: WriteTo: %v", name, err)
			}
			y.wall = func() int64 { return wall + int64(gap) }
			if _, err := y.ReadFrom(&buf); err != nil {
				t.Fatalf("%s: ReadFrom: %v", name, err)
			}
			cx.t.Add(int64(gap)) // x lives through the gap
			rx, ry := rand.New(rand.NewPCG(seed, 2)), rand.New(rand.NewPCG(seed, 2))
			dx, dy := snapTrace(x, cx, rx, 2000), snapTrace(y, cy, ry, 2000)
			mism, allowed := 0, 0
			for j := range dx {
				if dx[j] != dy[j] {
					mism++
				}
				if dx[j] {
					allowed++
				}
			}
			if mism != 0 {
				t.Errorf("%s: %d of %d decisions after the restore differ", name, mism, len(dx))
			}
			if allowed == 0 || allowed == len(dx) {
				t.Errorf("%s: the trace admitted %d of %d: it tests nothing", name, allowed, len(dx))
			}
			x.Close()
			y.Close()
		}
	}
}

// A client at 4 of 5 before the write gets 1 more after the restore, not 5,
// also when the wall clock went back (the gap counts as 0); a gap longer
// than the window frees it, and so does one of 100 days (past the
// counter's and the log's wrap guard: nothing is restored). The restored clock reads the
// writer's time plus the gap.
func TestSnapshotRestoreKeepsCountsAndAgesThemByTheWallGap(t *testing.T) {
	for i := range snapConfigs(nil) {
		cx := &fakeClock{}
		x := newLimiter(t, snapConfigs(cx)[i])
		for range 4 {
			x.Allow("client")
		}
		x.wall = func() int64 { return 1e18 }
		var buf bytes.Buffer
		if _, err := x.WriteTo(&buf); err != nil {
			t.Fatal(err)
		}
		snap := buf.Bytes()
		for _, c := range []struct {
			gap  int64
			want int
		}{{0, 1}, {int64(100 * time.Millisecond), 1}, {-int64(time.Hour), 1}, {int64(2 * time.Second), 5}, {int64(100 * 24 * time.Hour), 5}} {
			cy := &fakeClock{}
			y := newLimiter(t, snapConfigs(cy)[i])
			y.wall = func() int64 { return 1e18 + c.gap }
			if _, err := y.ReadFrom(bytes.NewReader(snap)); err != nil {
				t.Fatal(err)
			}
			if got := y.rel(y.now()); c.gap >= 0 && c.gap < int64(time.Hour) && got != c.gap {
				t.Errorf("%v gap %v: the restored engine time is %v, want the writer's 0 plus the gap", x.Config().Algorithm, time.Duration(c.gap), time.Duration(got))
			}
			got := 0
			for range 10 {
				if y.Allow("client") {
					got++
				}
			}
			if got != c.want {
				t.Errorf("%v gap %v (negative: the wall clock went back): admitted %d more, want %d", x.Config().Algorithm, time.Duration(c.gap), got, c.want)
			}
			y.Close()
		}
		x.Close()
	}
}

// validSnapshot returns a snapshot of a limiter of cfg with a few keys.
func validSnapshot(t testing.TB, cfg Config) []byte {
	t.Helper()
	l := newLimiter(t, cfg)
	defer l.Close()
	for i := range 30 {
		l.AllowN("k"+strconv.Itoa(i), 1+i%3)
	}
	var buf bytes.Buffer
	if _, err := l.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// checkEmptyAndUsable fails unless l tracks no key and still decides.
func checkEmptyAndUsable(t *testing.T, l *Limiter, what string) {
	t.Helper()
	if n := l.Len(); n != 0 {
		t.Errorf("%s: the limiter tracks %d keys after a refused restore, want 0", what, n)
	}
	if !l.Allow("after") || l.Len() != 1 {
		t.Errorf("%s: the limiter does not decide after a refused restore", what)
	}
}

// Corrupt, truncated, future-version and other-Config snapshots are refused
// with the error that says which, and the limiter stays usable and empty.
func TestReadFromRefusesBadSnapshotsAndStaysEmpty(t *testing.T) {
	for _, cfg := range snapConfigs(nil) {
		snap := validSnapshot(t, cfg)
		flip := func(i int) []byte { b := bytes.Clone(snap); b[i] ^= 0x40; return b }
		future := bytes.Clone(snap)
		binary.LittleEndian.PutUint32(future[8:], SnapshotVersion+1)
		binary.LittleEndian.PutUint32(future[136:], crc32c(future[:136]))
		other := cfg
		other.Window = 2 * time.Second
		otherLimit := cfg
		otherLimit.Limit = 6
		cases := []struct {
			name string
			data []byte
			cfg  Config
			want error
		}{
			{"empty", nil, cfg, ErrSnapshotCorrupt},
			{"not a snapshot", []byte("hello, world"), cfg, ErrSnapshotCorrupt},
			{"header bit flipped", flip(20), cfg, ErrSnapshotCorrupt},
			{"record bit flipped", flip(snapHeaderSize + 10), cfg, ErrSnapshotCorrupt},
			{"checksum bit flipped", flip(len(snap) - 1), cfg, ErrSnapshotCorrupt},
			{"truncated in the records", snap[:snapHeaderSize+20], cfg, ErrSnapshotCorrupt},
			{"truncated before the checksum", snap[:len(snap)-2], cfg, ErrSnapshotCorrupt},
			{"trailing bytes", append(bytes.Clone(snap), 0), cfg, ErrSnapshotCorrupt},
			{"future version", future, cfg, ErrSnapshotVersion},
			{"other Window", snap, other, ErrSnapshotConfig},
			{"other Limit", snap, otherLimit, ErrSnapshotConfig},
		}
		for _, c := range cases {
			name := fmt.Sprintf("%v/%s", cfg.Algorithm, c.name)
			l := newLimiter(t, c.cfg)
			_, err := l.ReadFrom(bytes.NewReader(c.data))
			if !errors.Is(err, c.want) {
				t.Errorf("%s: ReadFrom = %v, want %v", name, err, c.want)
			}
			checkEmptyAndUsable(t, l, name)
			l.Close()
		}
	}
	// The Config error names the field.
	cfg := snapConfigs(nil)[1]
	other := cfg
	other.Window = 2 * time.Second
	l := newLimiter(t, other)
	defer l.Close()
	if _, err := l.ReadFrom(bytes.NewReader(validSnapshot(t, cfg))); err == nil || !bytes.Contains([]byte(err.Error()), []byte("Window 1s")) {
		t.Errorf("other Window: error %v does not name the field and its values", err)
	}
}

func crc32c(b []byte) uint32 {
	var c crcWriter
	c.w = &bytes.Buffer{}
	c.Write(b)
	return c.crc
}

// ReadFrom refuses a limiter that already tracks keys, and leaves them.
func TestReadFromRefusesALimiterWithKeys(t *testing.T) {
	cfg := snapConfigs(nil)[1]
	snap := validSnapshot(t, cfg)
	l := newLimiter(t, cfg)
	defer l.Close()
	l.Allow("mine")
	if _, err := l.ReadFrom(bytes.NewReader(snap)); !errors.Is(err, ErrSnapshotNotEmpty) {
		t.Fatalf("ReadFrom on a limiter with a key = %v, want ErrSnapshotNotEmpty", err)
	}
	if l.Len() != 1 {
		t.Fatalf("the refused restore changed the keys: %d", l.Len())
	}
}

// WriteTo while requests decide (run under -race): the snapshot is
// well-formed and restores; it holds every key that existed before it.
func TestWriteToWhileDecidingRestores(t *testing.T) {
	for _, cfg := range snapConfigs(nil) {
		cfg.Clock = nil
		cfg.Limit, cfg.Window = 50, time.Hour // no key empties during the test
		cfg.MaxKeys = 10000
		l := newLimiter(t, cfg)
		for i := range 500 {
			l.Allow("pre" + strconv.Itoa(i))
		}
		stop := make(chan struct{})
		var wg sync.WaitGroup
		var decided atomic.Int64
		for g := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					l.Allow("k" + strconv.Itoa(g*100000+i%1000))
					l.Allow("pre" + strconv.Itoa(i%500))
					decided.Add(2)
				}
			}()
		}
		for decided.Load() < 2000 {
			runtime.Gosched() // the writes overlap decisions, also on one core
		}
		var snaps [][]byte
		for range 3 {
			var buf bytes.Buffer
			if _, err := l.WriteTo(&buf); err != nil {
				t.Fatal(err)
			}
			snaps = append(snaps, buf.Bytes())
		}
		close(stop)
		wg.Wait()
		for _, s := range snaps {
			y := newLimiter(t, cfg)
			if _, err := y.ReadFrom(bytes.NewReader(s)); err != nil {
				t.Fatalf("%v: restoring a snapshot written while deciding: %v", cfg.Algorithm, err)
			}
			if y.Len() < 500 {
				t.Errorf("%v: restored %d keys, want at least the 500 that existed before the write", cfg.Algorithm, y.Len())
			}
			y.Close()
		}
		l.Close()
	}
}

// WriteTo and ReadFrom allocate nothing per key: WriteTo as many
// allocations for 20,000 keys as for 20, ReadFrom only the tables' growth.
func TestSnapshotAllocatesNothingPerKey(t *testing.T) {
	for _, cfg := range snapConfigs(nil) {
		cfg.Limit, cfg.MaxKeys = 3, 100000
		allocs := func(keys int) (w, r float64) {
			l := newLimiter(t, cfg)
			defer l.Close()
			for i := range keys {
				l.Allow("k" + strconv.Itoa(i))
			}
			var buf bytes.Buffer
			l.WriteTo(&buf)
			snap := buf.Bytes()
			w = testing.AllocsPerRun(3, func() { buf.Reset(); l.WriteTo(&buf) })
			ys := make([]*Limiter, 4)
			for i := range ys {
				ys[i] = newLimiter(t, cfg)
				defer ys[i].Close()
			}
			i := 0
			r = testing.AllocsPerRun(3, func() { ys[i].ReadFrom(bytes.NewReader(snap)); i++ })
			return w, r
		}
		w1, r1 := allocs(20)
		w2, r2 := allocs(20000)
		if w2 > w1+2 {
			t.Errorf("%v: WriteTo allocates %v times for 20,000 keys, %v for 20", cfg.Algorithm, w2, w1)
		}
		// ReadFrom grows the tables as keys arrive: a few allocations per
		// growth (x1.4) of each of the 4 shards, O(log keys), none per key.
		if (r2-r1)/20000 > 0.02 {
			t.Errorf("%v: ReadFrom allocates %v times for 20,000 keys, %v for 20", cfg.Algorithm, r2, r1)
		}
	}
}

// FuzzReadFrom: any input is refused or restored, never a panic, and a
// refused one leaves the limiter empty and usable. The seed corpus holds
// valid snapshots of every algorithm.
func FuzzReadFrom(f *testing.F) {
	cfgs := snapConfigs(nil)
	for i, cfg := range cfgs {
		snap := validSnapshot(f, cfg)
		f.Add(uint8(i), snap)
		f.Add(uint8(i), snap[:len(snap)/2])
	}
	f.Fuzz(func(t *testing.T, alg uint8, data []byte) {
		cfg := cfgs[int(alg)%len(cfgs)]
		l, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		if _, err := l.ReadFrom(bytes.NewReader(data)); err != nil {
			if !errors.Is(err, ErrSnapshotCorrupt) && !errors.Is(err, ErrSnapshotConfig) && !errors.Is(err, ErrSnapshotVersion) {
				t.Fatalf("ReadFrom error %v wraps no snapshot sentinel", err)
			}
			checkEmptyAndUsable(t, l, "fuzz")
			return
		}
		for i := range 20 {
			l.AllowN("k"+strconv.Itoa(i), 2)
		}
	})
}

// A snapshot taken after SetLimit (and, for GCRA, SetBurst) restores into a
// limiter set to the same limits, with GCRA's virtual clock piece: the
// restored limiter decides as the writer does (0 mismatches).
func TestSnapshotAfterSetLimitDecidesLikeTheWriter(t *testing.T) {
	for i := range snapConfigs(nil) {
		cx, cy := &fakeClock{}, &fakeClock{}
		cx.t.Store(int64(time.Minute))
		cfgX, cfgY := snapConfigs(cx)[i], snapConfigs(cy)[i]
		cfgX.MaxLimit, cfgY.MaxLimit = 20, 20
		x := newLimiter(t, cfgX)
		defer x.Close()
		snapTrace(x, cx, rand.New(rand.NewPCG(uint64(i), 3)), 200)
		if err := x.SetLimit(3); err != nil {
			t.Fatal(err)
		}
		snapTrace(x, cx, rand.New(rand.NewPCG(uint64(i), 4)), 200)
		x.wall = func() int64 { return 1e18 }
		var buf bytes.Buffer
		if _, err := x.WriteTo(&buf); err != nil {
			t.Fatal(err)
		}
		y := newLimiter(t, cfgY)
		defer y.Close()
		y.wall = func() int64 { return 1e18 + int64(250*time.Millisecond) }
		if _, err := y.ReadFrom(bytes.NewReader(buf.Bytes())); !errors.Is(err, ErrSnapshotConfig) {
			t.Fatalf("%v: restore at the Config's limit of a snapshot at SetLimit(3) = %v, want ErrSnapshotConfig", cfgX.Algorithm, err)
		}
		if err := y.SetLimit(3); err != nil {
			t.Fatal(err)
		}
		if _, err := y.ReadFrom(bytes.NewReader(buf.Bytes())); err != nil {
			t.Fatalf("%v: %v", cfgX.Algorithm, err)
		}
		cx.t.Add(int64(250 * time.Millisecond))
		dx := snapTrace(x, cx, rand.New(rand.NewPCG(uint64(i), 5)), 1500)
		dy := snapTrace(y, cy, rand.New(rand.NewPCG(uint64(i), 5)), 1500)
		mism, allowed := 0, 0
		for j := range dx {
			if dx[j] != dy[j] {
				mism++
			}
			if dx[j] {
				allowed++
			}
		}
		if mism != 0 || allowed == 0 || allowed == len(dx) {
			t.Errorf("%v: %d of %d decisions differ after the restore (%d admitted)", cfgX.Algorithm, mism, len(dx), allowed)
		}
	}
}

// A record no table holds (a state word of a free or moved record, a ring
// head whose next position lies outside the ring) is refused as corrupt
// even under a valid checksum, before any decision could index with it.
func TestReadFromRefusesRecordsNoTableHolds(t *testing.T) {
	bad := map[Algorithm]uint64{
		SlidingCounter: 1 << 20,                   // atomiccounter.Free
		GCRA:           1 << 63,                   // not gcra.Live
		SlidingLog:     7<<32 | 0xFFFE<<16 | 1<<0, // next 0xFFFE in a ring of 5
	}
	for _, cfg := range snapConfigs(nil) {
		snap := validSnapshot(t, cfg)
		// The first block's first record: its state word after its hash.
		binary.LittleEndian.PutUint64(snap[snapHeaderSize+4+8:], bad[cfg.Algorithm])
		binary.LittleEndian.PutUint32(snap[len(snap)-4:], crc32c(snap[:len(snap)-4]))
		l := newLimiter(t, cfg)
		if _, err := l.ReadFrom(bytes.NewReader(snap)); !errors.Is(err, ErrSnapshotCorrupt) {
			t.Errorf("%v: a record of state %#x under a valid checksum: ReadFrom = %v, want ErrSnapshotCorrupt", cfg.Algorithm, bad[cfg.Algorithm], err)
		}
		checkEmptyAndUsable(t, l, cfg.Algorithm.String())
		l.Close()
	}
}

// TestSnapshotRestoresOnAMachineWithOtherShards: the key bound MaxMemory
// gives depends on the number of shards (16 x GOMAXPROCS by default), so a
// gateway restarted on a machine with another CPU count has another
// Config().MaxKeys. Its snapshot must still restore: records carry the
// key's hash and land in whatever shard it picks here.
func TestSnapshotRestoresOnAMachineWithOtherShards(t *testing.T) {
	for i := range snapConfigs(nil) {
		cx := &fakeClock{}
		cfgX := snapConfigs(cx)[i]
		cfgX.Shards, cfgX.MaxKeys, cfgX.MaxMemory = 4, 0, 4<<20
		x := newLimiter(t, cfgX)
		keys := make([]string, 200)
		for k := range keys {
			keys[k] = fmt.Sprintf("client-%d", k)
			for range 4 {
				x.Allow(keys[k])
			}
		}
		x.wall = func() int64 { return 1e18 }
		var buf bytes.Buffer
		if _, err := x.WriteTo(&buf); err != nil {
			t.Fatal(err)
		}
		cy := &fakeClock{}
		cfgY := snapConfigs(cy)[i]
		cfgY.Shards, cfgY.MaxKeys, cfgY.MaxMemory = 128, 0, 4<<20
		y := newLimiter(t, cfgY)
		if x.Config().MaxKeys == y.Config().MaxKeys {
			t.Fatalf("%v: both limiters bound %d keys; the test needs bounds that differ", cfgX.Algorithm, x.Config().MaxKeys)
		}
		y.wall = func() int64 { return 1e18 }
		if _, err := y.ReadFrom(bytes.NewReader(buf.Bytes())); err != nil {
			t.Fatalf("%v: restore with %d shards of a snapshot of %d: %v", cfgX.Algorithm, 128, 4, err)
		}
		for _, k := range keys {
			got := 0
			for range 10 {
				if y.Allow(k) {
					got++
				}
			}
			if got != 1 {
				t.Fatalf("%v: key %s at 4 of 5 admitted %d more after the restore, want 1", cfgX.Algorithm, k, got)
			}
		}
		x.Close()
		y.Close()
	}
}
