//go:build !race

package engine

// Scale tests: too slow under the race detector (CI runs them without it,
// as `make engine-scale`, part of `make test`).

import (
	"strconv"
	"testing"
	"time"
)

// 10 million one-off keys never grow key state past the bound.
func TestTenMillionOneOffKeysStayBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("scale test: run without -short (make engine-scale)")
	}
	for _, a := range algorithms {
		clk := &fakeClock{}
		const bound = 16 << 20
		l := newLimiter(t, Config{Algorithm: a, Limit: 16, Window: time.Second, Clock: clk, MaxMemory: bound})
		buf := make([]byte, 0, 32)
		for i := 0; i < 10_000_000; i++ {
			clk.t.Add(int64(time.Microsecond)) // 1 M new keys per second
			buf = strconv.AppendInt(append(buf[:0], "one-off-"...), int64(i), 10)
			l.Allow(string(buf))
		}
		st := l.Stats()
		if st.Bytes > bound || st.Keys > st.MaxKeys {
			t.Fatalf("%v: %+v: past the bound of %d bytes", a, st, bound)
		}
		if st.Reclaimed == 0 || st.Keys == 0 {
			t.Fatalf("%v: %+v: expected idle keys to be reused", a, st)
		}
		t.Logf("%v: %d keys tracked (bound %d), %d bytes of %d, %d reclaimed, %d overflowed", a, st.Keys, st.MaxKeys, st.Bytes, bound, st.Reclaimed, st.Overflow)
	}
}

// With default settings 1 M SlidingCounter keys, and 1 M SlidingLog keys at
// Limit 16, are all tracked without eviction.
func TestDefaultsTrackOneMillionKeys(t *testing.T) {
	if testing.Short() {
		t.Skip("scale test: run without -short (make engine-scale)")
	}
	for _, a := range algorithms {
		l := newLimiter(t, Config{Algorithm: a, Limit: 16, Window: time.Minute, Clock: &fakeClock{}})
		for i := 0; i < 1_000_000; i++ {
			if !l.AllowAt("user-"+strconv.Itoa(i), 0).Allowed {
				t.Fatalf("%v: key %d denied", a, i)
			}
		}
		st := l.Stats()
		if st.Keys != 1_000_000 || st.Overflow != 0 || st.Reclaimed != 0 {
			t.Fatalf("%v: %+v", a, st)
		}
		t.Logf("%v: 1M keys, %d bytes of key state (%.1f bytes/key), bound %d keys", a, st.Bytes, float64(st.Bytes)/1e6, st.MaxKeys)
	}
}
