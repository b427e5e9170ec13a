package shard

import (
	"math/bits"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/slidelimit/slidelimit/internal/keyhash"
	"github.com/slidelimit/slidelimit/internal/offheap"
)

// Flat is the one-level key table: a key's record (its state word beside
// its hash) lives in the slot that the key's hash probes to, so a decision
// on an existing key reads one cache line of the table and CASes a word in
// it. SlidingCounter and GCRA keep their whole state in that word; see
// Table for the two-level layout SlidingLog needs for its rings.
//
// # Slots and probing
//
// A shard's table is an array of 64-byte buckets of four 16-byte records
// (state, hash). A key's home bucket is fastrange of its hash (the high
// word of hash x buckets, so any bucket count works and growth is not tied
// to powers of two); a probe scans the home bucket, then the next ones
// (linear probing by cache line), until it finds the hash or an empty slot.
// A hash word is 0 in an empty slot and 1 in a tombstone (a freed key's
// slot: probes go on past it, inserts reuse it); Hash maps the two real
// hashes 0 and 1 to 2 and 3, which merges four of 2^64 values.
//
// # Load and growth
//
// A shard's table is rebuilt when its live keys plus tombstones would pass
// 7/8 of its slots, to live/(5/8) slots: the load stays between 5/8 and
// 7/8, so a key costs between 18.3 and 25.6 bytes of table (plus a shard's
// two-bucket minimum). A sweep that leaves a table under 5/8 full rebuilds
// it to 5/8, so memory taken by a flood of keys comes back, and the bound
// per key holds again after every sweep. (Between a sweep's frees and its
// rebuild of that shard, and for tombstones left by lazy reuse, a table
// holds fewer live keys than it was sized for; MaxBytes bounds it all the
// same.)
//
// # Key churn
//
// At the key bound, lazy reuse frees keys in cursor order while new keys
// land at random, each in the first empty or tombstone slot of its probe;
// the empty slots that end a probe then gather in a few regions, and
// misses (every insert's) scan ever longer runs of full slots, though the
// load never passes 7/8 (we measured mean miss probes of 25k slots in a
// 200k-key shard). So the slots scanned by misses under the lock longer
// than maxProbeBuckets are counted, and once they reach the table's slots
// since its last rebuild, the next Claim rebuilds it (no tombstones; the
// size a growth would give, 5/8 live, or the same size if that is
// bigger), which spreads the empty slots evenly again. A rebuild reads
// each slot once, so it costs no more than the long probes that paid for
// it: the work per insert stays within twice what the load alone asks,
// amortised, and the probes come back to about 8 buckets at most.
//
// That alone does not suffice: the keys that survive lazy reuse are those
// its cursor has not reached, so cursor-order freeing makes the density of
// live keys uneven in hash order, and a rebuild, which places keys by hash,
// keeps the clusters. So lazy reuse first looks for an idle key in the
// new key's home buckets and frees it there: the new key takes the place
// of an old one nearby and the density stays even.
//
// A rebuild runs under the shard's lock and moves every live record to the
// new table: it CASes the old slot's state word to the Moved word (which
// no live state equals) and copies the value it replaced, then publishes
// the new table with one atomic store. A lock-free reader still on the old
// table either CASed before the move (the move copies its write) or finds
// Moved (its CAS fails, or it reads Moved as stale) and looks again, under
// the lock, in the new table. Nothing written is lost and no key has two
// records. The old table is left to the garbage collector, which frees it
// once the last reader has dropped it (tables hold no pointers, so the
// collector never scans them).
//
// # Memory: the Go heap, measured against mmap
//
// Tables are plain Go arrays without pointers (the collector never scans
// them). We measured tables in anonymous mmap'd memory, with 4 KiB pages
// and advised MADV_HUGEPAGE (package internal/offheap; BenchmarkFloorTable
// in ./bench: one random slot access per decision, interleaved runs on the
// 2-core machine): no difference at 100k keys (median of 10: 13.0 ns heap,
// 12.3 huge, 13.2 4k) or 1M (42.5, 40.5, 40.0); at 10M huge pages cut the
// slot access from 107.5 to 77.5 ns (median of 5). They are not adopted: a
// table that grows must retire its old generation while lock-free readers
// may still be reading it. On the heap the collector frees it after the
// last reader; an mmap'd table could be unmapped only when no reader can
// hold it, which Go cannot tell without an epoch scheme on the hot path,
// and keeping retired mappings instead leaves one per rebuild (tombstone
// purges under key churn make that unbounded against vm.max_map_count).
// A 10M-key deployment that wants the 30 % would want a fixed-capacity
// table; this one grows with the keys it has.
//
// # Reclamation
//
// The protocol of Table (see the package doc) with a slot for a record: a
// key is freed only by tryFree, under the lock, when its word is idle as
// of a fresh clock reading, by a CAS to Free that fails if a request wrote
// the word since; then its hash word becomes a tombstone. Free comes
// before the tombstone, so a reader that still matches the old hash reads
// Free (stale) and looks again. A slot is reused for a new key only with
// state dated no earlier than the time its previous owner was freed
// (Claim's readyAt), so a late writer of the previous owner, holding a word
// of that older owner, never finds it again (its CAS fails).
//
// A key emptied by a Reset is noted (NoteReset; the last pendingResets of
// each shard): Claim at the bound tries those slots first, by the same
// tryFree, so a Reset key's slot is reused once its emptied state is idle
// rather than when the cursor or the sweep reaches it.
//
// # Capacity
//
// Config.MaxKeys bounds the live keys of the whole table (a CAS-reserved
// global count), so a new key overflows only when MaxKeys keys are live
// and lazy reuse's bounded sample finds no idle key: the shard's noted
// Reset keys, up to homeReclaimSlots slots of the new key's probe path
// (on every Claim) and reclaimBudget slots from the cursor (unless a
// fruitless scan set idleHint, up to Rescan ahead). So a new key can
// overflow while an idle key sits elsewhere in its shard; the sweep frees
// it. Config.MaxBytes bounds the bytes of
// the shards and their tables: a growth that would pass it is refused, and the new key overflows
// (with keys spread evenly over shards by the keyed hash, MaxKeys binds
// first; MaxBytes only guards against skew). A rebuild briefly holds the
// old and the new table of one shard.
type Flat struct {
	shards    []FlatShard
	mask      uint64
	hasher    keyhash.Hasher
	free      uint64 // state word of no key
	moved     uint64 // state word of a record moved to a newer table
	capacity  int64  // Config.MaxKeys
	maxBytes  int64  // Config.MaxBytes
	live      atomic.Int64
	bytes     atomic.Int64
	idle      func(w uint64, now int64) (bool, int64)
	now       func() int64
	rescan    int64
	reclaimed atomic.Uint64
}

// FlatConfig sizes a Flat.
type FlatConfig struct {
	Shards   int    // power of two
	MaxKeys  int    // bound on live keys in the whole table
	MaxBytes int64  // bound on the tables' bytes; 0: none
	Free     uint64 // State of a record that holds no key
	Moved    uint64 // State of a record moved by a rebuild; never a live state, != Free
	// Idle, Now and Rescan are as in Config (Idle is required).
	Idle   func(w uint64, now int64) (idle bool, readyAt int64)
	Now    func() int64
	Rescan int64
}

// FlatShard is one shard of a Flat, laid out like Shard: the table pointer
// that lookups read and the writer fields on separate cache lines.
type FlatShard struct {
	flatRead
	_ [CacheLine - unsafe.Sizeof(flatRead{})%CacheLine]byte
	flatWrite
	_ [CacheLine - unsafe.Sizeof(flatWrite{})%CacheLine]byte
}

type flatRead struct {
	tab atomic.Pointer[flatTab]
}

// flatWrite fits one cache line (tables have under 2^32 slots: MaxKeys is
// below 2^31 and the load at least 5/8 after a rebuild... or 2 buckets).
type flatWrite struct {
	mu        sync.Mutex
	live      atomic.Int64 // keys in the table (read without the lock by Len)
	freeReady int64        // latest time a key of this shard was freed
	idleHint  int64        // no idle key expected before this time
	tombs     uint32       // tombstones in the table
	cursor    uint32       // where the next lazy-reuse scan starts
	overProbe uint32       // slots scanned by long misses since the last rebuild (saturating)
	// resets holds the slots of keys Reset lately (slot+1; 0: none), the
	// newest at resetNext-1: Claim frees them first once they are idle,
	// wherever the cursor is (see "Reclamation").
	resetNext uint32
	resets    [pendingResets]uint32
}

// pendingResets is how many Reset keys per shard Claim remembers.
const pendingResets = 3

// flatTab is one generation of a shard's table.
type flatTab struct {
	recs []Record // 4 x nb records, bucket b at [4b, 4b+4)
	nb   uint64   // buckets
	cost int64    // heap bytes of the generation (tabCost)
}

// tabCost is the Go heap a table of nb buckets takes: its slab's words
// (records, alignment slack, size-class rounding; newTab keeps no Slab)
// and its flatTab.
func tabCost(nb uint64) int64 {
	return offheap.HeapSlabBytes(int(nb*bucketSlots*2)) + offheap.HeapBytes(int64(unsafe.Sizeof(flatTab{})))
}

const (
	bucketSlots = 4 // records per bucket: 4 x 16 bytes, one cache line
	hashEmpty   = 0
	hashTomb    = 1
	minBuckets  = 2

	// maxProbeBuckets: a miss under the lock that scans more buckets
	// counts its slots against the shard (see "Key churn"). At a uniform
	// load of 7/8 a miss scans about 8 buckets on average, so a probe of
	// 16 is mostly clustering, not load.
	maxProbeBuckets = 16

	// homeReclaimSlots is how many slots from a new key's home bucket lazy
	// reuse examines before its cursor (two cache lines).
	homeReclaimSlots = 2 * bucketSlots
)

// bucketsFor returns the bucket count that holds keys at a load of 5/8.
func bucketsFor(keys int64) uint64 {
	return max(minBuckets, uint64((keys*8+5*bucketSlots-1)/(5*bucketSlots)))
}

// FlatBytesPerKey is the most table bytes a live key costs (at a load of
// 5/8, just after a rebuild), rounded up.
const FlatBytesPerKey = 26

// FlatShardBytes is the fixed cost of a shard: its struct and its
// smallest table, as the heap holds them (tabCost).
var FlatShardBytes = int64(unsafe.Sizeof(FlatShard{})) + tabCost(minBuckets)

// NewFlat returns an empty Flat. It fails only when the memory for the
// shards' first tables cannot be had.
func NewFlat(c FlatConfig) (*Flat, error) {
	t := &Flat{
		shards:   make([]FlatShard, c.Shards),
		mask:     uint64(c.Shards - 1),
		hasher:   keyhash.New(),
		free:     c.Free,
		moved:    c.Moved,
		capacity: int64(c.MaxKeys),
		maxBytes: c.MaxBytes,
		idle:     c.Idle,
		now:      c.Now,
		rescan:   max(c.Rescan, 1),
	}
	if t.maxBytes <= 0 {
		t.maxBytes = 1<<63 - 1
	}
	t.bytes.Store(int64(c.Shards) * int64(unsafe.Sizeof(FlatShard{})))
	for i := range t.shards {
		tab, err := t.newTab(minBuckets)
		if err != nil {
			return nil, err
		}
		t.shards[i].tab.Store(tab)
		t.bytes.Add(tab.bytes())
	}
	return t, nil
}

func (t *Flat) newTab(nb uint64) (*flatTab, error) {
	// A heap slab: 64-byte aligned, so a bucket is one cache line.
	slab, err := offheap.New(int(nb*bucketSlots*2), offheap.Heap)
	if err != nil {
		return nil, err
	}
	w := slab.Words()
	// Safety: Record is two atomic.Uint64 (16 bytes, 8-aligned, no
	// pointers); the words are referenced by the table, so they live as
	// long as any reader holds it.
	recs := unsafe.Slice((*Record)(unsafe.Pointer(&w[0])), len(w)/2)
	// The state words of empty slots stay zero, whatever Free is: a state
	// is read only after its slot's hash matched, and Publish stores the
	// state before the hash.
	return &flatTab{recs: recs, nb: nb, cost: tabCost(nb)}, nil
}

func (tab *flatTab) bytes() int64 { return tab.cost }

// Hash returns key's hash under the table's key (package keyhash), with 0
// and 1 (the empty and tombstone marks) mapped to 2 and 3.
func (t *Flat) Hash(key string) uint64 {
	h := t.hasher.Sum(key)
	if h <= hashTomb {
		h += 2
	}
	return h
}

// Shards returns the number of shards.
func (t *Flat) Shards() int { return len(t.shards) }

// ShardAt returns shard i.
func (t *Flat) ShardAt(i int) *FlatShard { return &t.shards[i] }

// Capacity returns the bound on live keys (FlatConfig.MaxKeys).
func (t *Flat) Capacity() int { return int(t.capacity) }

// Bytes returns the bytes of the shards and their current tables.
func (t *Flat) Bytes() int64 { return t.bytes.Load() }

// Reclaimed returns how many idle keys were freed so far.
func (t *Flat) Reclaimed() uint64 { return t.reclaimed.Load() }

// Lock and Unlock guard the shard's writer side: Find, Claim, Publish.
func (s *FlatShard) Lock()   { s.mu.Lock() }
func (s *FlatShard) Unlock() { s.mu.Unlock() }

// Len returns the keys of s.
func (s *FlatShard) Len() int { return int(s.live.Load()) }

// Lookup finds the record of hash h without taking a lock. A miss is not
// final (a rebuild may be under way): confirm it under the lock with Find.
// A hit's State may be Free or Moved (freed or moved under the reader),
// which the caller treats as a miss.
func (t *Flat) Lookup(h uint64) (*FlatShard, *Record) {
	s := &t.shards[h&t.mask]
	return s, s.tab.Load().find(h)
}

// Touch loads the first word of h's home bucket, so that a Lookup of h
// soon after finds the line in cache: a caller with many keys to decide
// touches them all first, and their cache misses overlap. (An atomic load
// is never dropped by the compiler, used or not.)
func (t *Flat) Touch(h uint64) {
	tab := t.shards[h&t.mask].tab.Load()
	b, _ := bits.Mul64(h, tab.nb)
	tab.recs[b*bucketSlots].Hash.Load()
}

// Find looks h up under the lock. A miss that probed past maxProbeBuckets
// marks the shard crowded (see "Key churn").
func (t *Flat) Find(s *FlatShard, h uint64) *Record {
	rec, n := s.tab.Load().probe(h)
	if rec == nil && n > maxProbeBuckets {
		s.overProbe = uint32(min(uint64(s.overProbe)+uint64(n)*bucketSlots, 1<<32-1))
	}
	return rec
}

// find probes for h: its record, or nil at the first empty slot.
func (tab *flatTab) find(h uint64) *Record {
	rec, _ := tab.probe(h)
	return rec
}

// probe is find that also returns how many buckets it scanned.
func (tab *flatTab) probe(h uint64) (*Record, int) {
	b, _ := bits.Mul64(h, tab.nb)
	for n := 1; ; n++ {
		bk := tab.recs[b*bucketSlots : b*bucketSlots+bucketSlots : b*bucketSlots+bucketSlots]
		for i := range bk {
			switch bk[i].Hash.Load() {
			case h:
				return &bk[i], n
			case hashEmpty:
				return nil, n
			}
		}
		if b++; b == tab.nb {
			b = 0
		}
	}
}

// vacancy returns the first empty or tombstone slot of h's probe sequence
// and whether it is a tombstone. Under the lock (or on a table not yet
// published).
func (tab *flatTab) vacancy(h uint64) (*Record, bool) {
	b, _ := bits.Mul64(h, tab.nb)
	for {
		bk := tab.recs[b*bucketSlots : b*bucketSlots+bucketSlots : b*bucketSlots+bucketSlots]
		for i := range bk {
			if hw := bk[i].Hash.Load(); hw <= hashTomb {
				return &bk[i], hw == hashTomb
			}
		}
		if b++; b == tab.nb {
			b = 0
		}
	}
}

// Claim reserves a record for hash h, which the caller found missing under
// the lock, and returns the slot to Publish it in (under the same lock
// hold) and readyAt, the time the caller must not date the new key's state
// before (a tombstone's previous owner was freed then; 0 for a slot never
// used). The record counts against MaxKeys; when none is left, Claim frees
// an idle key of this shard for it (lazy reuse), and ok is false when it
// finds none, or when growing the table would pass MaxBytes. now is a
// clock reading (never a caller's time).
func (t *Flat) Claim(s *FlatShard, h uint64, now int64) (rec *Record, readyAt int64, ok bool) {
	if !t.reserve() && !t.reclaimOne(s, h, now) {
		return nil, 0, false
	}
	tab := s.tab.Load()
	if used := uint64(s.live.Load()) + uint64(s.tombs) + 1; used*8 > tab.nb*bucketSlots*7 {
		nt, err := t.rebuild(s, s.live.Load()+1)
		if err != nil {
			t.live.Add(-1) // give the reservation back
			return nil, 0, false
		}
		tab = nt
	} else if uint64(s.overProbe) >= tab.nb*bucketSlots {
		// Clustered (see "Key churn"): lay the live keys out afresh, in a
		// table sized as a growth would size it (5/8 of its slots live,
		// the load FlatBytesPerKey budgets) or in one of the same size if
		// that is bigger. Not always the same size: a table grown only as
		// far as 7/8 before the bound was reached, whose tombstones these
		// rebuilds clear before they could trigger the growth, would stay
		// 7/8 full of live keys, with misses long enough to trigger the
		// next rebuild after a fifth of its slots in inserts
		// (TestFlatChurnAtBoundRebuildsRarely).
		nb := max(tab.nb, bucketsFor(s.live.Load()+1))
		nt, err := t.rebuildTo(s, nb)
		if err != nil && nb != tab.nb {
			nt, err = t.rebuildTo(s, tab.nb) // MaxBytes refused the growth
		}
		if err == nil {
			tab = nt
		}
	}
	rec, tomb := tab.vacancy(h)
	if tomb {
		s.tombs--
		readyAt = s.freeReady
	}
	return rec, readyAt, true
}

// NoteReset tells the table that key h has just been emptied by a Reset:
// lazy reuse frees its slot for a new key as soon as the emptied state is
// idle, wherever the shard's cursor is (up to pendingResets keys per
// shard; older ones are left to the cursor and the sweep), and the next
// Claim looks for idle keys at once.
func (t *Flat) NoteReset(h uint64) {
	s := &t.shards[h&t.mask]
	s.Lock()
	s.idleHint = 0
	tab := s.tab.Load()
	if rec := tab.find(h); rec != nil {
		// The slot's index in the table that holds it now (a rebuild
		// clears the list, so it never names a slot of another table).
		i := (uintptr(unsafe.Pointer(rec)) - uintptr(unsafe.Pointer(&tab.recs[0]))) / unsafe.Sizeof(Record{})
		s.resets[s.resetNext] = uint32(i) + 1
		s.resetNext = (s.resetNext + 1) % pendingResets
	}
	s.Unlock()
}

// Publish stores a claimed record's first state and then its hash, which
// makes it visible to lookups. Under the lock that Claim ran under.
func (t *Flat) Publish(s *FlatShard, rec *Record, h, state uint64) {
	rec.State.Store(state)
	rec.Hash.Store(h)
	s.live.Add(1)
}

// reserve takes one key of the table-wide bound, if any is left.
func (t *Flat) reserve() bool {
	for {
		a := t.live.Load()
		if a >= t.capacity {
			return false
		}
		if t.live.CompareAndSwap(a, a+1) {
			return true
		}
	}
}

// rebuild moves the shard's live records to a new table sized for keys
// (see "Load and growth"). Under the lock.
func (t *Flat) rebuild(s *FlatShard, keys int64) (*flatTab, error) {
	return t.rebuildTo(s, bucketsFor(keys))
}

// rebuildTo is rebuild to a table of nb buckets.
func (t *Flat) rebuildTo(s *FlatShard, nb uint64) (*flatTab, error) {
	old := s.tab.Load()
	grow := tabCost(nb) - old.bytes()
	for {
		b := t.bytes.Load()
		if grow > 0 && b+grow > t.maxBytes {
			return nil, errNoRoom
		}
		if t.bytes.CompareAndSwap(b, b+grow) {
			break
		}
	}
	nt, err := t.newTab(nb)
	if err != nil {
		t.bytes.Add(-grow)
		return nil, err
	}
	for i := range old.recs {
		r := &old.recs[i]
		hw := r.Hash.Load()
		if hw <= hashTomb {
			continue
		}
		// Move the word: after this CAS no reader can change it here, and
		// every write that won before it is in w.
		var w uint64
		for {
			w = r.State.Load()
			if r.State.CompareAndSwap(w, t.moved) {
				break
			}
		}
		dst, _ := nt.vacancy(hw)
		dst.State.Store(w)
		dst.Hash.Store(hw)
	}
	s.tab.Store(nt)
	s.tombs = 0
	s.overProbe = 0
	s.resets = [pendingResets]uint32{} // slots of the old table
	return nt, nil
}

// errNoRoom is a growth refused by MaxBytes.
var errNoRoom = noRoomError{}

type noRoomError struct{}

func (noRoomError) Error() string { return "shard: table bytes at MaxBytes" }

// tryFree frees rec if its key is idle (see the package doc's protocol);
// keep says the caller takes over the freed key's reservation (lazy reuse)
// instead of returning it to the bound. It returns whether it freed rec
// and, when rec is active, when it will be idle. Under the lock.
func (t *Flat) tryFree(s *FlatShard, rec *Record, now int64, total, keep bool) (freed bool, readyAt int64) {
	if rec.Hash.Load() <= hashTomb {
		return false, 0
	}
	w := rec.State.Load()
	if w == t.free || w == t.moved {
		return false, 0
	}
	now = max(now, t.now()) // after the load: see the package doc
	if idle, ready := t.idle(w, now); !idle && !total {
		return false, ready
	}
	if !rec.State.CompareAndSwap(w, t.free) {
		return false, 0 // written since the load: active again
	}
	rec.Hash.Store(hashTomb)
	s.tombs++
	s.live.Add(-1)
	s.freeReady = max(s.freeReady, now)
	if !keep {
		t.live.Add(-1)
	}
	t.reclaimed.Add(1)
	return true, 0
}

// reclaimOne frees one idle key of shard s for a new key of hash h when
// the bound is reached, keeping its reservation for the new key. It looks
// first at the homeReclaimSlots slots from h's home bucket (see "Key
// churn": freeing where the new key lands keeps the live keys' density
// even over the table), then at reclaimBudget slots from the shard's
// cursor unless a fruitless scan said none is idle before idleHint. Under
// the lock.
func (t *Flat) reclaimOne(s *FlatShard, h uint64, now int64) bool {
	if t.idle == nil || s.live.Load() == 0 {
		return false
	}
	tab := s.tab.Load()
	n := uint64(len(tab.recs))
	for i, p := range s.resets {
		if p == 0 {
			continue
		}
		freed, at := t.tryFree(s, &tab.recs[p-1], now, false, true)
		if freed || at == 0 {
			s.resets[i] = 0 // reused now, or gone (freed, or written since)
		}
		if freed {
			return true
		}
	}
	b, _ := bits.Mul64(h, tab.nb)
	for i, pos := 0, b*bucketSlots; i < homeReclaimSlots; i++ {
		// Only slots on h's probe path, before its first empty slot: a
		// slot freed there is the new key's vacancy (or a tombstone before
		// it is), so these frees leave no tombstone behind.
		if tab.recs[pos].Hash.Load() == hashEmpty {
			break
		}
		if freed, _ := t.tryFree(s, &tab.recs[pos], now, false, true); freed {
			return true
		}
		if pos++; pos == n {
			pos = 0
		}
	}
	if now < s.idleHint {
		return false
	}
	soonest := int64(1<<63 - 1)
	for i := 0; i < reclaimBudget; i++ {
		if uint64(s.cursor) >= n {
			s.cursor = 0
		}
		rec := &tab.recs[s.cursor]
		s.cursor++
		freed, at := t.tryFree(s, rec, now, false, true)
		if freed {
			return true
		}
		if at > 0 {
			soonest = min(soonest, at)
		}
	}
	s.idleHint = min(soonest, now+min(t.rescan, 1<<63-1-now))
	return false
}

// Sweep frees every idle key of the table as of now, a clock reading
// (each judged with a fresh one), and returns how many it freed; total is
// as for Table.Sweep. A shard rebuilt while it is swept is swept again from
// its start, so every key present throughout the sweep is examined. A
// shard left under 5/8 full is rebuilt to 5/8.
func (t *Flat) Sweep(now int64, total bool) int {
	if t.idle == nil {
		return 0
	}
	freedN := 0
	for i := range t.shards {
		s := &t.shards[i]
		s.Lock()
		tab := s.tab.Load()
		for pos := 0; pos < len(tab.recs); {
			end := min(pos+sweepBatch, len(tab.recs))
			for ; pos < end; pos++ {
				if freed, _ := t.tryFree(s, &tab.recs[pos], now, total, false); freed {
					freedN++
				}
			}
			s.idleHint = 0
			s.Unlock() // let inserts and rebuilds in between batches
			s.Lock()
			if nt := s.tab.Load(); nt != tab {
				tab, pos = nt, 0
			}
		}
		if live := s.live.Load(); tab.nb > minBuckets && uint64(live)*8 < tab.nb*bucketSlots*5 && bucketsFor(live) < tab.nb {
			_, _ = t.rebuild(s, live) // shrinking never passes MaxBytes
		}
		s.Unlock()
	}
	return freedN
}
