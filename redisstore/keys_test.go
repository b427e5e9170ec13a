package redisstore

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/internal/redistest"
)

// crc16 is CRC-16/XMODEM (polynomial 0x1021, initial 0), the checksum Redis
// Cluster reduces mod 16384 to find a key's slot.
func crc16(b string) uint16 {
	var crc uint16
	for i := 0; i < len(b); i++ {
		crc ^= uint16(b[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}

// hashTag is the part of a Redis key that Cluster hashes: between the first
// '{' and the first '}' after it, if that is not empty; else the whole key.
func hashTag(key string) string {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			return key[i+1 : i+1+j]
		}
	}
	return key
}

func slot(key string) int { return int(crc16(hashTag(key)) % 16384) }

func TestCRC16(t *testing.T) {
	// The reference value from the Redis Cluster specification.
	if got := crc16("123456789"); got != 0x31c3 {
		t.Fatalf("crc16(123456789) = %#x, want 0x31c3", got)
	}
}

// hostileKeys break a naive "{" + key + "}" hash tag: empty, braces
// anywhere, binary.
var hostileKeys = []string{"", "}", "{", "}{", "{}", "}x", "{x}", "a}b{c", "\x00", "\xff\xfe}", strings.Repeat("}", 100), "user:1"}

// FuzzKeyNames: for every key, all the Redis keys of one
// limiter key hash to the slot of its digest tag (so a script touching
// several is legal on a cluster, and a caller cannot choose the slot), and
// distinct keys or configurations never share a name.
func FuzzKeyNames(f *testing.F) {
	for _, k := range hostileKeys {
		f.Add(k, k+"x")
	}
	ks := []keyspace{
		newKeyspace(Config{Prefix: DefaultPrefix, Algorithm: engine.SlidingLog, Window: time.Minute, Limit: 5}),
		newKeyspace(Config{Prefix: DefaultPrefix, Algorithm: engine.SlidingCounter, Window: time.Minute, Limit: 5}),
		newKeyspace(Config{Prefix: DefaultPrefix, Algorithm: engine.SlidingLog, Window: time.Second, Limit: 5}),
		newKeyspace(Config{Prefix: DefaultPrefix, Algorithm: engine.SlidingLog, Window: time.Minute, Limit: 51}),
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		names := map[string]string{}
		for i, k := range ks {
			for _, key := range []string{a, b} {
				state, tg := k.state(key)
				marks := k.marks(key)
				want := fmt.Sprintf("%04x", tg)
				if got := hashTag(state); got != want {
					t.Fatalf("key %q: state %q hashes tag %q, want the digest tag %q", key, state, got, want)
				}
				if slot(state) != slot(marks) || slot(state) != int(crc16(want)%16384) {
					t.Fatalf("key %q: state and marks in slots %d, %d", key, slot(state), slot(marks))
				}
				for _, n := range []string{state, marks} {
					id := fmt.Sprintf("keyspace %d key %q", i, key)
					if prev, ok := names[n]; ok && prev != id {
						t.Fatalf("%s and %s share the name %q", prev, id, n)
					}
					names[n] = id
				}
			}
		}
	})
}

// TestHostileKeys: keys that break a naive hash tag are
// limited exactly like any other, for both algorithms (on a cluster too:
// see TestCluster).
func TestHostileKeys(t *testing.T) {
	srv := redistest.Start(t)
	client := newClient(t, srv.Addr())
	for _, alg := range algorithms {
		s := newStore(t, Config{Client: client, Algorithm: alg, Limit: 2, Window: time.Hour, OnFailure: FailOpen})
		testHostileKeys(t, s)
	}
}

func testHostileKeys(t *testing.T, s *Store) {
	t.Helper()
	for _, k := range hostileKeys {
		for i := range 3 {
			d, err := s.AllowNContext(context.Background(), k, 1)
			if err != nil {
				t.Fatalf("%v key %q: %v", s.cfg.Algorithm, k, err)
			}
			if d.Allowed != (i < 2) {
				t.Fatalf("%v key %q, request %d: %+v; want exactly Limit 2 admitted", s.cfg.Algorithm, k, i, d)
			}
		}
		if err := s.ResetContext(context.Background(), k); err != nil {
			t.Fatalf("reset %q: %v", k, err)
		}
	}
}

// TestConfigsDoNotShareState: limiters with different
// algorithms, windows or limits on the same keys under the default prefix
// keep separate state: a 5 per minute log beside a 2 per second one admits
// 5, not 2 and not the sum, and a counter beside a log gets no WRONGTYPE.
func TestConfigsDoNotShareState(t *testing.T) {
	srv := redistest.Start(t)
	client := newClient(t, srv.Addr())
	mk := func(alg engine.Algorithm, limit int, w time.Duration) *Store {
		return newStore(t, Config{Client: client, Algorithm: alg, Limit: limit, Window: w})
	}
	limiters := []*Store{
		mk(engine.SlidingLog, 5, time.Minute),
		mk(engine.SlidingLog, 2, time.Second),
		mk(engine.SlidingLog, 3, time.Minute),
		mk(engine.SlidingCounter, 4, time.Minute),
	}
	admitted := make([]int, len(limiters))
	for range 8 {
		for i, s := range limiters {
			d, err := s.AllowNContext(context.Background(), "api-key", 1)
			if err != nil {
				t.Fatalf("limiter %d: %v", i, err)
			}
			if d.Allowed {
				admitted[i]++
			}
		}
	}
	for i, s := range limiters {
		if admitted[i] != s.cfg.Limit {
			t.Errorf("%v %d per %v beside the others admitted %d, want %d", s.cfg.Algorithm, s.cfg.Limit, s.cfg.Window, admitted[i], s.cfg.Limit)
		}
	}
}
