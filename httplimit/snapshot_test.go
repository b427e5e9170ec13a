package httplimit

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/slidelimit/slidelimit/engine"
)

// The snapshot tests run on the engine's own clock with an hour's window:
// the wall time a test takes is nothing beside it, so a restored key is
// where it was when written.

func snapEngine(alg engine.Algorithm, limit int) engine.Config {
	return engine.Config{Algorithm: alg, Limit: limit, Window: time.Hour, MaxMemory: 1 << 20}
}

// snapRules is one rule per in-memory kind: each algorithm owned, a ready
// *engine.Limiter (namespaced keys), and a default.
func snapRules(t *testing.T) Options {
	t.Helper()
	opts, ready := fuzzOpts()
	t.Cleanup(func() { _ = ready.Close() })
	return opts
}

var snapPaths = []string{"/log", "/counter", "/gcra", "/ready", "/other"}

func newMW(t testing.TB, opts Options) *Middleware {
	t.Helper()
	m, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	return m
}

// hit sends one GET from ip through m and returns the status.
func hit(m *Middleware, path, ip string) int {
	r := httptest.NewRequest(http.MethodGet, path, nil)
	r.RemoteAddr = ip + ":40000"
	w := httptest.NewRecorder()
	m.Handler(okHandler).ServeHTTP(w, r)
	return w.Code
}

// admitted counts the requests ip gets through path before the first
// refusal (at most limit+1 tries).
func admitted(m *Middleware, path, ip string, limit int) int {
	for i := 0; i <= limit; i++ {
		if hit(m, path, ip) != http.StatusOK {
			return i
		}
	}
	return limit + 1
}

// spent takes 4 of 5 on every path for 192.0.2.1 and returns the snapshot.
func spent(t *testing.T, m *Middleware) []byte {
	t.Helper()
	for _, p := range snapPaths {
		for i := 0; i < 4; i++ {
			if c := hit(m, p, "192.0.2.1"); c != http.StatusOK {
				t.Fatalf("%s request %d: %d", p, i, c)
			}
		}
	}
	var buf bytes.Buffer
	n, err := m.WriteTo(&buf)
	if err != nil {
		t.Fatalf("WriteTo: %v", err)
	}
	if n != int64(buf.Len()) {
		t.Fatalf("WriteTo reported %d bytes, wrote %d", n, buf.Len())
	}
	return buf.Bytes()
}

func TestSnapshotRestoresEveryInMemoryRule(t *testing.T) {
	snap := spent(t, newMW(t, snapRules(t)))
	m := newMW(t, snapRules(t))
	n, err := m.ReadFrom(bytes.NewReader(snap))
	if err != nil {
		t.Fatalf("ReadFrom: %v", err)
	}
	if n != int64(len(snap)) {
		t.Errorf("ReadFrom reported %d bytes of %d", n, len(snap))
	}
	for _, p := range snapPaths {
		if got := admitted(m, p, "192.0.2.1", 5); got != 1 {
			t.Errorf("%s: the client at 4 of 5 got %d more after the restore, want 1", p, got)
		}
		if got := admitted(m, p, "192.0.2.2", 5); got != 5 {
			t.Errorf("%s: a client the snapshot never saw got %d, want 5", p, got)
		}
	}
}

func TestSnapshotSkipsRulesGoneOrChangedAndRestoresTheRest(t *testing.T) {
	snap := spent(t, newMW(t, snapRules(t)))
	opts := snapRules(t)
	opts.Rules = []Rule{
		{Name: "log", PathPrefix: "/log", Engine: snapEngine(engine.SlidingLog, 6)}, // another limit
		// counter is gone
		{Name: "gcra", PathPrefix: "/gcra", Engine: snapEngine(engine.GCRA, 5)},                  // the same
		{Name: "ready", PathPrefix: "/ready", Engine: snapEngine(engine.SlidingLog, 5)},          // owns its limiter now: keys not namespaced
		{Name: "counter2", PathPrefix: "/counter", Engine: snapEngine(engine.SlidingCounter, 5)}, // new
	}
	m := newMW(t, opts)
	_, err := m.ReadFrom(bytes.NewReader(snap))
	if !errors.Is(err, ErrRuleNotRestored) || !errors.Is(err, engine.ErrSnapshotConfig) {
		t.Fatalf("ReadFrom: %v, want ErrRuleNotRestored and engine.ErrSnapshotConfig", err)
	}
	if errors.Is(err, engine.ErrSnapshotCorrupt) {
		t.Errorf("a whole snapshot with skipped rules reported as corrupt: %v", err)
	}
	for _, name := range []string{`"log"`, `"counter"`, `"ready"`} {
		if !strings.Contains(err.Error(), name) {
			t.Errorf("the error does not name rule %s: %v", name, err)
		}
	}
	if strings.Contains(err.Error(), `"gcra"`) || strings.Contains(err.Error(), `"default"`) {
		t.Errorf("the error names a restored rule: %v", err)
	}
	for _, c := range []struct {
		path string
		want int
	}{{"/log", 6}, {"/counter", 5}, {"/ready", 5}, {"/gcra", 1}, {"/other", 1}} {
		if got := admitted(m, c.path, "192.0.2.1", 6); got != c.want {
			t.Errorf("%s: %d admitted after the restore, want %d", c.path, got, c.want)
		}
	}
}

func TestSnapshotOfASharedLimiterIsWrittenOnceAndRestoresEveryRuleOnIt(t *testing.T) {
	opts := func() Options {
		l, err := engine.New(snapEngine(engine.SlidingLog, 5))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = l.Close() })
		return Options{Rules: []Rule{
			{Name: "a", PathPrefix: "/a", Limiter: l},
			{Name: "b", PathPrefix: "/b", Limiter: l},
		}}
	}
	src := newMW(t, opts())
	for _, p := range []string{"/a", "/b"} {
		for i := 0; i < 4; i++ {
			hit(src, p, "192.0.2.1")
		}
	}
	var buf bytes.Buffer
	if _, err := src.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	if got := binary.LittleEndian.Uint32(buf.Bytes()[12:]); got != 1 {
		t.Errorf("the snapshot has %d records for one limiter, want 1", got)
	}
	m := newMW(t, opts())
	if _, err := m.ReadFrom(&buf); err != nil {
		t.Fatalf("ReadFrom: %v", err)
	}
	for _, p := range []string{"/a", "/b"} {
		if got := admitted(m, p, "192.0.2.1", 5); got != 1 {
			t.Errorf("%s: %d admitted after the restore, want 1", p, got)
		}
	}
}

// restoredOrEmpty checks that after a failed ReadFrom each rule has its
// whole state (1 left) or none (5 left): never part of it.
func restoredOrEmpty(t *testing.T, m *Middleware, what string) {
	t.Helper()
	for _, p := range snapPaths {
		if got := admitted(m, p, "192.0.2.1", 5); got != 1 && got != 5 {
			t.Fatalf("%s: %s half-restored: %d admitted, want 1 (restored) or 5 (empty)", what, p, got)
		}
	}
}

func TestSnapshotTruncatedAnywhereIsRefusedAndNoRuleIsHalfRestored(t *testing.T) {
	snap := spent(t, newMW(t, snapRules(t)))
	opts := snapRules(t)
	step := max(1, len(snap)/300) // every byte of a small snapshot; about 300 cuts of a larger one
	for cut := 0; cut < len(snap); cut += step {
		m, err := New(opts)
		if err != nil {
			t.Fatal(err)
		}
		_, err = m.ReadFrom(bytes.NewReader(snap[:cut]))
		if !errors.Is(err, engine.ErrSnapshotCorrupt) {
			t.Fatalf("cut at %d of %d: %v, want engine.ErrSnapshotCorrupt", cut, len(snap), err)
		}
		restoredOrEmpty(t, m, "cut at "+itoa(cut))
		_ = m.Close()
		opts = snapRules(t) // a fresh ready limiter
	}
}

func TestSnapshotWithAFlippedByteIsRefusedAndNoRuleIsHalfRestored(t *testing.T) {
	snap := spent(t, newMW(t, snapRules(t)))
	step := max(1, len(snap)/300)
	for i := 0; i < len(snap); i += step {
		bad := bytes.Clone(snap)
		bad[i] ^= 0x20
		m := newMW(t, snapRules(t))
		_, err := m.ReadFrom(bytes.NewReader(bad))
		if err == nil {
			t.Fatalf("byte %d flipped: accepted", i)
		}
		restoredOrEmpty(t, m, "byte "+itoa(i)+" flipped")
		_ = m.Close()
	}
}

func TestSnapshotOfALaterFormatVersionIsRefusedAsSuch(t *testing.T) {
	snap := spent(t, newMW(t, snapRules(t)))
	bad := bytes.Clone(snap)
	binary.LittleEndian.PutUint16(bad[8:], snapVersion+1)
	m := newMW(t, snapRules(t))
	if _, err := m.ReadFrom(bytes.NewReader(bad)); !errors.Is(err, engine.ErrSnapshotVersion) {
		t.Fatalf("ReadFrom: %v, want engine.ErrSnapshotVersion", err)
	}
	restoredOrEmpty(t, m, "later version")
	for _, in := range [][]byte{nil, []byte("not a snapshot at all, longer than a header")} {
		if _, err := newMW(t, snapRules(t)).ReadFrom(bytes.NewReader(in)); !errors.Is(err, engine.ErrSnapshotCorrupt) {
			t.Errorf("ReadFrom(%q): %v, want engine.ErrSnapshotCorrupt", in, err)
		}
	}
}

func TestSnapshotWithTrailingBytesIsRefusedAfterRestoringItsRules(t *testing.T) {
	snap := spent(t, newMW(t, snapRules(t)))
	m := newMW(t, snapRules(t))
	_, err := m.ReadFrom(bytes.NewReader(append(bytes.Clone(snap), 0)))
	if !errors.Is(err, engine.ErrSnapshotCorrupt) || !strings.Contains(err.Error(), "trailing") {
		t.Fatalf("ReadFrom: %v, want engine.ErrSnapshotCorrupt for trailing bytes", err)
	}
	for _, p := range snapPaths {
		if got := admitted(m, p, "192.0.2.1", 5); got != 1 {
			t.Errorf("%s: %d admitted, want 1 (its record was whole)", p, got)
		}
	}
}

func TestSnapshotOnAClosedMiddlewareIsAnError(t *testing.T) {
	m := newMW(t, snapRules(t))
	_ = m.Close()
	if _, err := m.WriteTo(&bytes.Buffer{}); err == nil {
		t.Error("WriteTo on a closed Middleware: no error")
	}
	if _, err := m.ReadFrom(strings.NewReader("")); err == nil {
		t.Error("ReadFrom on a closed Middleware: no error")
	}
}

// errWriter fails after n bytes.
type errWriter struct{ n int }

var errDiskFull = errors.New("disk full")

func (w *errWriter) Write(p []byte) (int, error) {
	if len(p) > w.n {
		k := w.n
		w.n = 0
		return k, errDiskFull
	}
	w.n -= len(p)
	return len(p), nil
}

func TestSnapshotWriteErrorIsReturned(t *testing.T) {
	m := newMW(t, snapRules(t))
	full := spent(t, m)
	for _, n := range []int{0, 10, snapHeaderLen + 3, len(full) / 2, len(full) - 1} {
		if _, err := m.WriteTo(&errWriter{n: n}); !errors.Is(err, errDiskFull) {
			t.Errorf("writer failing after %d bytes: %v, want its error", n, err)
		}
	}
}

// TestSnapshotWhileServingIsReadable writes snapshots while requests are
// decided (run it under -race): each one restores without error.
func TestSnapshotWhileServingIsReadable(t *testing.T) {
	m := newMW(t, snapRules(t))
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				hit(m, snapPaths[i%len(snapPaths)], "198.51.100."+itoa(i%200))
			}
		}()
	}
	for i := 0; i < 20; i++ {
		var buf bytes.Buffer
		if _, err := m.WriteTo(&buf); err != nil {
			t.Fatalf("WriteTo while serving: %v", err)
		}
		if _, err := newMW(t, snapRules(t)).ReadFrom(&buf); err != nil {
			t.Fatalf("a snapshot written while serving does not restore: %v", err)
		}
	}
	close(stop)
	wg.Wait()
}

// FuzzMiddlewareReadFrom: no input makes ReadFrom panic or leaves the
// Middleware unusable; an input it accepts without error was read to its
// end. (That no rule is ever half-restored is checked on every cut and
// every flipped byte of a real snapshot above.)
func FuzzMiddlewareReadFrom(f *testing.F) {
	opts, ready := fuzzOpts()
	src, err := New(opts)
	if err != nil {
		f.Fatal(err)
	}
	for _, p := range snapPaths {
		for i := 0; i < 4; i++ {
			hit(src, p, "192.0.2.1")
		}
	}
	var buf bytes.Buffer
	if _, err := src.WriteTo(&buf); err != nil {
		f.Fatal(err)
	}
	_ = src.Close()
	_ = ready.Close()
	snap := buf.Bytes()
	f.Add(snap)
	f.Add(snap[:len(snap)/2])
	f.Add(snap[:snapHeaderLen])
	f.Add([]byte(snapMagic))
	f.Fuzz(func(t *testing.T, in []byte) {
		opts, ready := fuzzOpts()
		defer ready.Close()
		m, err := New(opts)
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		n, rerr := m.ReadFrom(bytes.NewReader(in))
		if rerr == nil && n != int64(len(in)) {
			t.Fatalf("accepted after reading %d of %d bytes", n, len(in))
		}
		if bytes.Equal(in, snap) && rerr != nil {
			t.Fatalf("the seed snapshot: %v", rerr)
		}
		for _, p := range snapPaths {
			if got := admitted(m, p, "192.0.2.1", 5); got > 5 {
				t.Fatalf("%s: %d admitted, limit 5", p, got)
			}
		}
	})
}

// fuzzOpts is snapRules without a testing.T; the caller closes ready.
func fuzzOpts() (opts Options, ready *engine.Limiter) {
	ready, err := engine.New(snapEngine(engine.SlidingLog, 5))
	if err != nil {
		panic(err)
	}
	return Options{Rules: []Rule{
		{Name: "log", PathPrefix: "/log", Engine: snapEngine(engine.SlidingLog, 5)},
		{Name: "counter", PathPrefix: "/counter", Engine: snapEngine(engine.SlidingCounter, 5)},
		{Name: "gcra", PathPrefix: "/gcra", Engine: snapEngine(engine.GCRA, 5)},
		{Name: "ready", PathPrefix: "/ready", Limiter: ready},
	}, Default: &Rule{Name: "default", Engine: snapEngine(engine.SlidingLog, 5)}}, ready
}

func itoa(i int) string { return strconv.Itoa(i) }

// BenchmarkMiddlewareSnapshot measures the container's cost over the
// engine's own snapshot: a counter rule of 1 M keys written and read
// through the Middleware (framing, checksums, a 64 KiB chunk buffer) and
// through the bare engine.Limiter.
func BenchmarkMiddlewareSnapshot(b *testing.B) {
	const keys = 1 << 20
	cfg := engine.Config{Algorithm: engine.SlidingCounter, Limit: 100, Window: time.Hour, MaxKeys: keys}
	m, err := New(Options{Default: &Rule{Name: "default", Engine: cfg}})
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	l := m.def.eng
	key := make([]byte, 0, 16)
	for i := 0; i < keys; i++ {
		key = strconv.AppendInt(key[:0], int64(i), 10)
		l.Allow(string(key))
	}
	var snap, engSnap bytes.Buffer
	if _, err := m.WriteTo(&snap); err != nil {
		b.Fatal(err)
	}
	if _, err := l.WriteTo(&engSnap); err != nil {
		b.Fatal(err)
	}
	perKey := func(b *testing.B) {
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/keys, "ns/key")
	}
	b.Run("write/middleware/keys=1M", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(snap.Len()))
		for b.Loop() {
			if _, err := m.WriteTo(io.Discard); err != nil {
				b.Fatal(err)
			}
		}
		perKey(b)
	})
	b.Run("write/engine/keys=1M", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(engSnap.Len()))
		for b.Loop() {
			if _, err := l.WriteTo(io.Discard); err != nil {
				b.Fatal(err)
			}
		}
		perKey(b)
	})
	read := func(b *testing.B, data []byte, restore func(io.Reader) error) {
		b.ReportAllocs()
		b.SetBytes(int64(len(data)))
		for b.Loop() {
			if err := restore(bytes.NewReader(data)); err != nil {
				b.Fatal(err)
			}
		}
		perKey(b)
	}
	b.Run("read/middleware/keys=1M", func(b *testing.B) {
		read(b, snap.Bytes(), func(r io.Reader) error {
			m2, err := New(Options{Default: &Rule{Name: "default", Engine: cfg}})
			if err != nil {
				return err
			}
			defer m2.Close()
			_, err = m2.ReadFrom(r)
			return err
		})
	})
	b.Run("read/engine/keys=1M", func(b *testing.B) {
		read(b, engSnap.Bytes(), func(r io.Reader) error {
			l2, err := engine.New(cfg)
			if err != nil {
				return err
			}
			defer l2.Close()
			_, err = l2.ReadFrom(r)
			return err
		})
	})
}
