package shard

import (
	"runtime"
	"sync/atomic"

	"github.com/slidelimit/slidelimit/internal/keyhash"
)

// Snapshots (package engine's Limiter.WriteTo and ReadFrom) walk a table's
// records in batches and insert records into a fresh table. A record is
// identified by its hash, so a restored table must hash keys under the
// same keyhash key (SetHasher); records are inserted by hash, so the
// restoring table's shard count and layout may differ from the writer's.
//
// Consistency of a walk while the table serves: a batch is copied under
// its shard's lock, so no record is freed, reused or moved while it is
// read, and each record's words are read atomically (Flat: one State load;
// Table: the head word, the ring, and the head again until the two head
// loads agree). Requests still decide lock-free meanwhile: a batch holds
// each key's state as of the moment the batch read it, and misses what
// came after. A shard rebuilt between two of its batches is walked again
// from its start (a key may then appear twice: the later copy was read
// later, and a key's state only moves forward, so the restorer keeps the
// last one).

// Cursor is the position of a walk over a table's records: start with the
// zero Cursor.
type Cursor struct {
	shard int
	pos   int
	gen   any // the shard's table (Flat) or index (Table) the position is in
}

// Hasher returns the table's key hash (its key goes into a snapshot).
func (t *Flat) Hasher() keyhash.Hasher { return t.hasher }

// SetHasher replaces the table's key hash. Only on a table that holds no
// key and that no other goroutine uses yet (a table being restored).
func (t *Flat) SetHasher(h keyhash.Hasher) { t.hasher = h }

// Walk appends the hash and state word of the next live records to dst
// (two words each, at most cap(dst)/2 records, at least one if any is
// left) and returns it; an empty result means the walk is over. Each call
// holds one shard's lock for one batch.
func (t *Flat) Walk(c *Cursor, dst []uint64) []uint64 {
	dst = dst[:0]
	for c.shard < len(t.shards) {
		s := &t.shards[c.shard]
		s.Lock()
		tab := s.tab.Load()
		if c.gen != tab {
			c.gen, c.pos = tab, 0 // rebuilt since the last batch: again from its start
		}
		for c.pos < len(tab.recs) && len(dst)+2 <= cap(dst) {
			r := &tab.recs[c.pos]
			c.pos++
			h := r.Hash.Load()
			if h <= hashTomb {
				continue
			}
			// Under the lock nothing frees or moves r: a live hash has a
			// live word, which requests change only by CAS, one load.
			if w := r.State.Load(); w != t.free && w != t.moved {
				dst = append(dst, h, w)
			}
		}
		done := c.pos >= len(tab.recs)
		s.Unlock()
		if done {
			c.shard, c.pos, c.gen = c.shard+1, 0, nil
		}
		if len(dst)+2 > cap(dst) {
			return dst
		}
	}
	return dst
}

// Presize grows every shard's table to hold its share of keys keys (with
// room for the spread of a random hash) at the load a rebuild leaves, so
// that restoring that many keys rebuilds nothing: restored keys arrive in
// slot order, and inserts in that order into a table near its growth load
// probe long runs. Within MaxKeys and MaxBytes (a table that cannot grow
// stays as it is). Only on a table being restored.
func (t *Flat) Presize(keys int) {
	keys = min(keys, int(t.capacity))
	per := keys / len(t.shards)
	per += 4*isqrt(per) + 16 // 4 sigma of a shard's share
	for i := range t.shards {
		s := &t.shards[i]
		s.Lock()
		if bucketsFor(int64(per)) > s.tab.Load().nb {
			_, _ = t.rebuild(s, int64(per)) // errNoRoom: left to grow as keys come
		}
		s.Unlock()
	}
}

// isqrt is the integer square root of n >= 0, rounded down.
func isqrt(n int) int {
	r := 0
	for b := 1 << 30; b > 0; b >>= 1 {
		if (r+b)*(r+b) <= n {
			r += b
		}
	}
	return r
}

// Restore gives hash h (a value Hash returns: above 1) the state word w
// in a table being restored (no other goroutine uses it), replacing the
// state of a hash already present. now is the restored table's time. It
// returns false when the table has no room for another key.
func (t *Flat) Restore(h, w uint64, now int64) bool {
	s := &t.shards[h&t.mask]
	s.Lock()
	defer s.Unlock()
	// Not Find: a walk writes each shard's keys in slot order, sorted by
	// their home bucket, so a miss here probes to the end of the run the
	// previous keys built; counted as churn (see "Key churn") those probes
	// would rebuild the shard again and again.
	if rec := s.tab.Load().find(h); rec != nil {
		rec.State.Store(w)
		return true
	}
	rec, _, ok := t.Claim(s, h, now)
	if !ok {
		return false
	}
	t.Publish(s, rec, h, w)
	return true
}

// Hasher returns the table's key hash (its key goes into a snapshot).
func (t *Table) Hasher() keyhash.Hasher { return t.hasher }

// SetHasher is Flat.SetHasher for a Table.
func (t *Table) SetHasher(h keyhash.Hasher) { t.hasher = h }

// SlotsPer returns the ring slots per record (Config.SlotsPer).
func (t *Table) SlotsPer() int { return int(t.slotsPer) }

// Walk is Flat.Walk for a Table: each record is its hash, its state word
// and then its SlotsPer ring ticks, two to a word (slot 2i in the low half
// of word i), (SlotsPer+1)/2 words; dst must hold at least one record.
// The state and the ring are read as one state: the state word is loaded
// before and after the ring, and the ring is read again until the two
// loads agree (package ring: every batch but the newest is in the ring
// while the head names it, and a reader takes the newest from the head).
// A ring being reset in place (Config.Transient) is waited for. After
// copyTries tries the shard's lock is let go before the next, so that a
// record that cannot be copied for a while holds the walk, never the
// shard's new keys.
func (t *Table) Walk(c *Cursor, dst []uint64) []uint64 {
	dst = dst[:0]
	per := 2 + (int(t.slotsPer)+1)/2
	for c.shard < len(t.shards) {
		s := &t.shards[c.shard]
		s.Lock()
		ix := s.index.Load()
		if c.gen != ix {
			c.gen, c.pos = ix, 0 // grown since the last batch: again from its start
		}
		copied := true
		for c.pos < len(ix.e) && len(dst)+per <= cap(dst) {
			e := ix.e[c.pos].Load()
			if e == 0 {
				c.pos++
				continue
			}
			rec, slots := t.Record(s, e&refMask-1)
			if dst, copied = t.appendRecord(dst, rec, slots); !copied {
				break // c.pos stays on it: tried again after the lock is let go
			}
			c.pos++
		}
		done := c.pos >= len(ix.e)
		s.Unlock()
		if done {
			c.shard, c.pos, c.gen = c.shard+1, 0, nil
		}
		if len(dst)+per > cap(dst) || (!copied && len(dst) > 0) {
			return dst
		}
		if !copied {
			// Nothing to return yet: let the shard's inserts and the
			// record's writer in, then take the lock again (a rebuilt
			// index restarts the shard, as between batches).
			runtime.Gosched()
		}
	}
	return dst
}

// copyTries bounds the copies of one record Walk makes under its shard's
// lock: a ring being rewritten in place, or a state word that moves on
// every try, would otherwise keep the lock from the shard's new keys for
// as long as that lasts (Forget lets the lock go for the same wait).
const copyTries = 16

// appendRecord appends rec's hash, state and ring (see Walk), or returns
// dst as it was and false after copyTries tries that found the ring being
// rewritten or the state moved. Under the shard's lock: the record holds
// its key throughout.
func (t *Table) appendRecord(dst []uint64, rec *Record, slots []atomic.Uint32) ([]uint64, bool) {
	n := len(dst)
	for spins := 0; spins < copyTries; spins++ {
		dst = dst[:n]
		w := rec.State.Load()
		if t.transient != nil && t.transient(w) {
			runtime.Gosched() // a request is rewriting the ring in place: wait for it
			continue
		}
		dst = append(dst, rec.Hash.Load(), w)
		for i := 0; i < len(slots); i += 2 {
			v := uint64(slots[i].Load())
			if i+1 < len(slots) {
				v |= uint64(slots[i+1].Load()) << 32
			}
			dst = append(dst, v)
		}
		if rec.State.Load() == w {
			return dst, true
		}
		if spins > 8 {
			runtime.Gosched()
		}
	}
	return dst[:n], false
}

// Restore is Flat.Restore for a Table: words is one record as Walk writes
// it (hash, state, ring).
func (t *Table) Restore(words []uint64, now int64) bool {
	h := words[0]
	s := &t.shards[h&t.mask]
	s.Lock()
	defer s.Unlock()
	ref, found := t.Find(s, h)
	if !found {
		var ok bool
		if ref, _, ok = t.Alloc(s, now); !ok {
			return false
		}
	}
	rec, slots := t.Record(s, ref)
	rec.Hash.Store(h)
	for i := range slots {
		slots[i].Store(uint32(words[2+i/2] >> (32 * (i % 2))))
	}
	rec.State.Store(words[1])
	if !found {
		t.Insert(s, h, ref)
	}
	return true
}
