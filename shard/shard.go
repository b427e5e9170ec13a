// Package shard holds the key tables: a key is hashed under a per-table
// random key, the hash picks one of a power-of-two number of shards, and
// each shard maps the hash to a record: a state word beside the key's hash.
// There are two tables. Flat (SlidingCounter, GCRA) keeps the record in
// the slot the hash probes to, so a decision reads one cache line; see its
// doc.
// Table (SlidingLog) keeps a small index of 4-byte entries that point to
// records in slabs, each record followed by its ring of Limit ticks, which
// would make a one-level table's empty slots too costly. Both follow one
// reclamation protocol, stated below.
//
// # Identity
//
// A key's identity is its 64-bit hash (package keyhash: SipHash-2-4 under
// a random per-table 128-bit key, which a snapshot saves: Hasher,
// SetHasher); the key bytes are not kept. Two keys collide
// only if their 64-bit hashes are equal: with n keys the chance that any
// two of them collide is about n^2 / 2^65, which is 2.7e-6 at 10 million
// keys (they would then share one limit). Nobody can craft keys that
// collide with a victim's without the key; keyhash's doc says why seeded
// xxhash, which this package used before, does not give that.
//
// # Layout, and why it is pointer-free
//
// Records (and, for SlidingLog, their rings of uint32 ticks) live in
// arrays of atomic words, which hold no pointers, so the garbage collector
// never scans key state: 10 million keys are a few thousand array headers
// to the GC, not 10 million objects.
//
// The index of a Table shard is an open-addressing table of uint32 entries
// (linear probing): an 8-bit tag from the hash and a 24-bit record
// reference. The tag spares most probes a look at the record; the record's
// full hash confirms a match. 4-byte entries at a load factor between 0.4
// and 0.8 cost 5 to 10 bytes per key.
//
// We measured the obvious alternative index, github.com/puzpuzpuz/xsync/v3
// MapOf keyed by the hash (BenchmarkIndex in this package, both in one run
// on the 2-core machine): MapOf is as fast or a little faster on lookups of
// existing keys (median 35 vs 41 ns at 100k keys; within noise at 1 M), but
// it costs 55-66 bytes per key against our 25-27 (record included), and it
// gives the garbage collector 4 MB (100k keys) to 50 MB (1 M keys) of heap
// to scan against our constant 0.12 MB. A limiter that must bound memory
// and GC work for millions of keys wants the second pair of numbers, so the
// pointer-free tables stay.
//
// # Concurrency
//
// Lookups take no lock: they load the shard's current index or table (an
// atomic pointer), probe it with atomic loads, and confirm the record's
// hash. Inserts, removals, growth and sweeps of a shard happen under that
// shard's mutex. Growth builds a new index (or table) and publishes it with
// one atomic store; a reader still probing the old one may miss a key
// inserted after the copy, and a reader may miss a key while a removal
// shifts entries back. Such a miss is never final: callers treat a miss as
// "take the lock and look again" before inserting, so one key never gets
// two records.
//
// # Reclamation
//
// Records are recycled, and the whole protocol lives in this package. A
// table is given the algorithm's idle test (Config.Idle: does this state
// word hold anything that counts at or after time now, and if so from when
// on will it not) and the limiter's clock (Config.Now). Every time a table
// judges idleness by is a clock reading, never a caller's time (a time
// ahead of the clock, passed to AllowAt, must not make other keys idle). A
// record holding a key is freed by exactly one routine, tryFree, under the
// shard's lock, and only like this:
//
//  1. load the state word w;
//  2. read the clock afresh (after the load) and take now' = max(now, that
//     reading), so that a stale reading (a sweep that read the clock before
//     walking a million records) never judges a word written after it;
//  3. free only if Idle(w, now') says w holds nothing from now' on (or, in
//     a total sweep, unconditionally: see Sweep);
//  4. CAS the word from w to Free: the CAS fails if any request wrote the
//     word since step 1 (the key became active again), and then nothing is
//     freed;
//  5. remove the key from the index (Flat: mark its slot a tombstone) and
//     note now' as the time from which the record is reusable.
//
// The idle test is the algorithm's: a word whose newest time is ahead of
// now' (written at a later time than the clock shows) is never idle. Late
// writers (a request that loaded the word before step 4 and writes after it)
// are harmless: their CAS on the word fails once it is Free, and a record is
// reused for a new key only with state dated no earlier than its noted time,
// which is after everything its previous owner wrote (package ring relies on
// that for its slots), and, by the caller, no earlier than a clock reading
// taken under the shard's lock after it found the key missing: later than
// any reading that freed the key's previous incarnation, so a request that
// read the clock long ago cannot recreate a key, freed as idle, back in the
// window that made it active.
//
// Two callers start the protocol: Sweep (every record of every shard, at a
// clock reading) and Alloc/Claim (a new key when MaxKeys keys are held
// reuses an idle record of its shard: lazy reuse, which examines at most
// 64 records per new key, so that a flood of new keys at the bound costs
// bounded work, and after a fruitless look skips looking until the soonest
// idle time it saw or Config.Rescan; a Reset makes it look at once). Forget
// is the one way to free a record that is not idle (engine's Reset of a
// SlidingLog key): it is reusable only from the time its old state would
// have emptied (deferred), so late writers still find newer values.
//
// Deferred records wait in a small timing wheel of deferBuckets lists per
// shard, chained through their own Hash words like the free list: a record
// costs nothing on top of its slab while it waits (so the memory bound
// covers it), Release and Alloc do a constant amount of work whatever the
// number of deferred records, and any record whose time has come is
// reusable, not only the oldest. A bucket holds the records whose readyAt
// rounds up to one multiple of the bucket width (Config.DeferSpan / 7); it
// is reusable as a whole once that multiple has passed, so a record waits
// at most a bucket width past its readyAt.
//
// # Capacity
//
// Nothing is allocated per key up front: a shard starts with its struct
// and a 16-entry index, and allocates chunks of records (and grows the
// directory that points to them) as keys arrive. TableBytes is the most
// bytes a Table of a Config can reach; package engine sizes MaxKeys so
// that it stays within Config.MaxMemory.
//
// Config.MaxKeys bounds the records handed out in the whole Table (a global
// count, not a per-shard split), so a new key overflows only when MaxKeys
// records are in use (idle ones included, until the sweep or lazy reuse
// frees them), or free but held by other shards' free lists (they are
// reused by those shards' keys; Len then reads below MaxKeys by that many).
// A shard's own ceiling is its fair share times 4 plus 64 (for hashed keys
// unreachable in practice), which keeps its chunk table small. Flat bounds
// live keys the same way (see its doc).
package shard

import (
	"runtime"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/slidelimit/slidelimit/internal/keyhash"
	"github.com/slidelimit/slidelimit/internal/offheap"
)

// CacheLine is the padding unit for fields written by one core and read by
// others. 64 bytes is the line size of x86-64 and of most arm64 cores; two
// shards' mutexes never share a line, so inserts in one shard do not slow
// lookups in its neighbour.
const CacheLine = 64

// MaxRecordsPerShard is the largest number of records a shard can address
// (24-bit references, 0 reserved for an empty index entry).
const MaxRecordsPerShard = 1<<24 - 2

// Record is one key's state: the algorithm's word and the key's hash.
type Record struct {
	State atomic.Uint64
	Hash  atomic.Uint64
}

// RecordBytes is the size of a Record.
const RecordBytes = int(unsafe.Sizeof(Record{}))

// RecordRingBytes is the slab bytes of a Table record and its ring of
// slotsPer ticks (padded to whole words).
func RecordRingBytes(slotsPer int) int { return 8 * (2 + (slotsPer+1)/2) }

// chunkDir is a shard's directory of chunks. It only grows: a new chunk is
// appended (into spare capacity, or into a copy twice the size) and the
// new directory is published with one atomic store, so a reader holding an
// older directory still finds every chunk it can name (its references are
// below that directory's length, see Record).
type chunkDir struct {
	c []*chunk
}

// chunk is a block of records, each followed by its ring: record r of the
// chunk is words [r*stride, r*stride+2) (State, Hash) and its ring of
// SlotsPer uint32 ticks the words after them, so the head word and the
// ring slots a decision reads (see package ring: the oldest entry, at the
// ring's next position, and the newest batch just before it) are a line or
// two from each other instead of in another region. The array holds no
// pointers.
type chunk struct {
	words []atomic.Uint64
}

type index struct {
	e    []atomic.Uint32
	mask uint32
}

const (
	tagShift = 24
	refMask  = 1<<tagShift - 1
	minIndex = 16
)

// Config sizes a Table.
type Config struct {
	Shards       int    // power of two
	MaxKeys      int    // bound on records handed out in the whole table
	SlotsPer     int    // uint32 slots per record (SlidingLog ring size), 0 for none
	Free         uint64 // State word of a record that holds no key
	ChunkBytes   int    // target bytes per chunk; 0 means 64 KiB
	PreallocKeys int    // records to allocate up front (rounded to chunks); 0 for none
	// DeferSpan is the longest a record freed by Forget can wait to be
	// reusable (readyAt - now in Release); it sets the width of the
	// deferred records' buckets, DeferSpan/7 (see Reclamation). A record
	// deferred further is still never reused early, only later. 0 means 1.
	DeferSpan int64

	// Idle reports whether state word w holds nothing that counts at time
	// now or later, and if it does, from when on it will not (readyAt).
	// nil: records are never reclaimed (only Forget and Release free them).
	Idle func(w uint64, now int64) (idle bool, readyAt int64)
	// Now reads the clock Idle's times come from (required with Idle).
	Now func() int64
	// Transient reports whether a state word is being rewritten by a
	// request that owns the record for the moment (SlidingLog's in-place
	// ring reset): Forget waits until it is not. Such a word is never idle.
	Transient func(w uint64) bool
	// Rescan is the longest a full shard skips lazy-reuse scans after one
	// found nothing idle (the scan saw only a sample); 0 means 1.
	Rescan int64
}

// Table is a sharded key table. All methods are safe for concurrent use.
type Table struct {
	shards     []Shard
	mask       uint64
	hasher     keyhash.Hasher
	slotsPer   uint32
	stride     uint32 // words per record and ring
	chunkShift uint32
	chunkMask  uint32
	perShard   uint32 // ceiling of one shard
	free       uint64
	capacity   int64        // Config.MaxKeys
	allocated  atomic.Int64 // records handed out of chunks, all shards
	idle       func(w uint64, now int64) (bool, int64)
	now        func() int64
	transient  func(w uint64) bool
	rescan     int64
	deferWidth int64         // ns of readyAt per deferred bucket
	reclaimed  atomic.Uint64 // records freed by tryFree
}

// Shard is one shard of a Table. Its lookup fields and its writer fields
// sit on separate cache lines, and shards are padded to whole lines, so an
// insert (which writes the mutex) never invalidates a line that lookups in
// this or a neighbouring shard read.
type Shard struct {
	shardRead
	_ [CacheLine - unsafe.Sizeof(shardRead{})%CacheLine]byte
	shardWrite
	_ [CacheLine - unsafe.Sizeof(shardWrite{})%CacheLine]byte
}

// shardRead is read by every lookup, written only under mu (and rarely):
// index growth and chunk allocation.
type shardRead struct {
	index atomic.Pointer[index]
	dir   atomic.Pointer[chunkDir]
}

// shardWrite is the writer side, under mu.
type shardWrite struct {
	mu        sync.Mutex
	live      atomic.Int64 // records holding a key (read without the lock by Len)
	bytes     atomic.Int64 // bytes of chunks and index
	used      uint32       // index entries in use
	allocated uint32       // records handed out of chunks so far (bump pointer)
	freeHead  uint32       // first free record + 1 (0: none); the list runs through the records' Hash words
	freeReady int64        // latest time a record on the free list became reusable
	cursor    uint32       // where the next reclaim scan starts
	idleHint  int64        // no idle record expected before this time (lazy reuse skips scans)
	deferred  [deferBuckets]deferBucket
}

// deferBuckets is the number of buckets of a shard's timing wheel of
// deferred records (see Reclamation): with DeferSpan/(deferBuckets-1) per
// bucket, a bucket's slot is taken again only by records due
// deferBuckets widths later, when the ones it held are reusable.
const deferBuckets = 8

// deferBucket is a list of deferred records, chained through their Hash
// words (ref+1 of the next, 0 at the end), all reusable from until on.
type deferBucket struct {
	head, tail uint32 // ref+1; 0: empty
	until      int64
}

// New returns an empty Table.
func New(c Config) *Table {
	n := c.Shards
	rpc, per := layout(c)
	stride := RecordRingBytes(c.SlotsPer) / 8
	shift := uint32(0)
	for 1<<shift < rpc {
		shift++
	}
	t := &Table{
		shards:     make([]Shard, n),
		mask:       uint64(n - 1),
		hasher:     keyhash.New(),
		slotsPer:   uint32(c.SlotsPer),
		stride:     uint32(stride),
		chunkShift: shift,
		chunkMask:  uint32(rpc - 1),
		perShard:   uint32(per),
		free:       c.Free,
		capacity:   int64(c.MaxKeys),
		idle:       c.Idle,
		now:        c.Now,
		transient:  c.Transient,
		rescan:     max(c.Rescan, 1),
		deferWidth: max(1, (c.DeferSpan+deferBuckets-2)/(deferBuckets-1)),
	}
	pre := (c.PreallocKeys + n - 1) / n
	for i := range t.shards {
		s := &t.shards[i]
		s.dir.Store(&chunkDir{})
		ix := newIndex(minIndex)
		s.index.Store(ix)
		s.bytes.Store(ShardBytes + shardFixedBytes + indexBytes(len(ix.e)))
		for int(s.allocatedCap(t)) < pre && s.growChunks(t) {
		}
	}
	return t
}

// ShardBytes is the size of a Shard: its struct, counted in Bytes.
const ShardBytes = int64(unsafe.Sizeof(Shard{}))

// What the Go heap holds for a shard's parts (offheap.HeapBytes: size
// classes; a pointer slice over 512 bytes carries an 8-byte header): the
// index and directory structs (one each published; a replaced one is
// garbage), the index entries, a chunk (its words and its struct) and a
// directory's pointer array.
var shardFixedBytes = offheap.HeapBytes(int64(unsafe.Sizeof(index{}))) + offheap.HeapBytes(int64(unsafe.Sizeof(chunkDir{})))

func indexBytes(entries int) int64 { return offheap.HeapBytes(4 * int64(entries)) }

func chunkBytes(rpc, stride int) int64 {
	return offheap.HeapBytes(int64(rpc)*8*int64(stride)) + offheap.HeapBytes(int64(unsafe.Sizeof(chunk{})))
}

func dirBytes(capacity int) int64 {
	n := 8 * int64(capacity)
	if n > 512 {
		n += 8
	}
	return offheap.HeapBytes(n)
}

// layout returns the records per chunk (a power of two) and the ceiling of
// one shard for a Config.
func layout(c Config) (rpc, per int) {
	n := c.Shards
	fair := max(1, (c.MaxKeys+n-1)/n)
	per = max(1, min(c.MaxKeys, 4*fair+64, MaxRecordsPerShard))
	recBytes := RecordRingBytes(c.SlotsPer)
	cb := c.ChunkBytes
	if cb <= 0 {
		cb = 64 << 10
	}
	rpc = 1
	for rpc*2*recBytes <= cb && rpc*2 <= fair {
		rpc *= 2
	}
	return rpc, per
}

// TableBytes returns the most bytes (Bytes summed over shards) a Table of
// Config c can hold, without PreallocKeys: per shard its struct, an index
// of at most max(64, 10 x its keys) bytes (4-byte entries, at least 16,
// doubled at a load of 0.8), the chunks of the records handed out to it
// (whole chunks: up to a chunk less one record of slack) and a directory
// of at most twice its chunks (at least 4) pointers. Records handed out
// in all shards are at most c.MaxKeys; deferred and free records are among
// them.
func TableBytes(c Config) int64 {
	rpc, _ := layout(c)
	n, k := int64(c.Shards), int64(c.MaxKeys)
	rec := int64(RecordRingBytes(c.SlotsPer))
	stride := int(rec / 8)
	chunk := chunkBytes(rpc, stride)
	// A shard's chunks hold its records in whole chunks: at most
	// ceil(k_i/rpc), so k/rpc + 1 per shard in all. The directory's array
	// (pointers, doubled from 4) takes at most twice 8 bytes per chunk,
	// plus size-class rounding (at most 1/8 for these sizes) and, past 512
	// bytes, an 8-byte header.
	chunks := k/int64(rpc) + n
	perShard := ShardBytes + shardFixedBytes + 64 + 10 + dirBytes(4) + 8
	return n*perShard + k*10 + chunks*(chunk+18)
}

func newIndex(size int) *index {
	return &index{e: make([]atomic.Uint32, size), mask: uint32(size - 1)}
}

// Hash returns the 64-bit hash of key under the table's key (package
// keyhash). It does not allocate.
func (t *Table) Hash(key string) uint64 { return t.hasher.Sum(key) }

// Shard returns the shard of hash h.
func (t *Table) Shard(h uint64) *Shard { return &t.shards[h&t.mask] }

// Shards returns the number of shards.
func (t *Table) Shards() int { return len(t.shards) }

// ShardAt returns shard i.
func (t *Table) ShardAt(i int) *Shard { return &t.shards[i] }

// Capacity returns the bound on records handed out (Config.MaxKeys).
func (t *Table) Capacity() int { return int(t.capacity) }

// home and tag of a hash. The shard uses the low bits, the home slot bits
// 20 and up, the tag the top 8 bits: independent for any table size.
func home(h uint64) uint32 { return uint32(h >> 20) }
func tag(h uint64) uint32  { return uint32(h>>56) << tagShift }

// Record returns record ref of shard s and its ring slots.
func (t *Table) Record(s *Shard, ref uint32) (*Record, []atomic.Uint32) {
	c := s.dir.Load().c[ref>>t.chunkShift]
	w := c.words[(ref&t.chunkMask)*t.stride:]
	// Safety: a record is the two words at w[0:2], its ring the 4*slotsPer
	// bytes after them, inside the chunk (stride covers both); the chunk
	// holds no pointers and lives as long as the Table.
	rec := (*Record)(unsafe.Pointer(&w[0]))
	if t.slotsPer == 0 {
		return rec, nil
	}
	return rec, unsafe.Slice((*atomic.Uint32)(unsafe.Pointer(&w[2])), t.slotsPer)
}

// Lookup finds the record of hash h without taking a lock. A miss is not
// final (see the package doc): confirm it under the shard's lock with Find.
func (t *Table) Lookup(h uint64) (*Shard, *Record, []atomic.Uint32) {
	s := &t.shards[h&t.mask]
	ix := s.index.Load()
	tg := tag(h)
	for i := home(h) & ix.mask; ; i = (i + 1) & ix.mask {
		e := ix.e[i].Load()
		if e == 0 {
			return s, nil, nil
		}
		if e&^refMask == tg {
			rec, slots := t.Record(s, e&refMask-1)
			if rec.Hash.Load() == h {
				return s, rec, slots
			}
		}
	}
}

// Touch loads h's home index entry and, if one is there, the state word of
// the record it names and the ring slot that word's bits 16-31 point at
// (package ring's next position: the slot a decision reads), so that a
// Lookup of h soon after finds those lines in cache (see Flat.Touch).
func (t *Table) Touch(h uint64) {
	s := &t.shards[h&t.mask]
	ix := s.index.Load()
	if e := ix.e[home(h)&ix.mask].Load(); e != 0 {
		rec, slots := t.Record(s, e&refMask-1)
		if next := int(rec.State.Load()>>16) & 0xFFFF; next < len(slots) {
			slots[next].Load()
		}
	}
}

// Lock and Unlock guard the shard's writer side: Find, Alloc, Insert,
// Remove, Release.
func (s *Shard) Lock()   { s.mu.Lock() }
func (s *Shard) Unlock() { s.mu.Unlock() }

// Len returns the records of s that hold a key.
func (s *Shard) Len() int { return int(s.live.Load()) }

// Bytes returns the bytes s has allocated for chunks and its index.
func (s *Shard) Bytes() int64 { return s.bytes.Load() }

// Find looks h up under the lock. It returns the record reference.
func (t *Table) Find(s *Shard, h uint64) (ref uint32, ok bool) {
	ix := s.index.Load()
	tg := tag(h)
	for i := home(h) & ix.mask; ; i = (i + 1) & ix.mask {
		e := ix.e[i].Load()
		if e == 0 {
			return 0, false
		}
		if e&^refMask == tg {
			ref := e&refMask - 1
			if rec, _ := t.Record(s, ref); rec.Hash.Load() == h {
				return ref, true
			}
		}
	}
}

func (s *Shard) allocatedCap(t *Table) uint32 {
	return uint32(len(s.dir.Load().c)) << t.chunkShift
}

// growChunks allocates the next chunk; false when the shard is at its
// ceiling. Under the lock (or before the Table is shared).
func (s *Shard) growChunks(t *Table) bool {
	d := s.dir.Load()
	if s.allocatedCap(t) >= t.perShard {
		return false
	}
	rpc := int(t.chunkMask + 1)
	c := &chunk{words: make([]atomic.Uint64, rpc*int(t.stride))}
	if t.free != 0 {
		for j := 0; j < rpc; j++ {
			c.words[j*int(t.stride)].Store(t.free) // State is a record's first word
		}
	}
	grown := chunkBytes(rpc, int(t.stride))
	cs := d.c
	if len(cs) == cap(cs) {
		// A new backing array twice the size; the old one stays valid for
		// readers that hold the old directory.
		nc := make([]*chunk, len(cs), max(4, 2*cap(cs)))
		copy(nc, cs)
		grown += dirBytes(cap(nc)) - dirBytes(cap(cs))
		cs = nc
	}
	// Appending into spare capacity writes an element no published
	// directory covers; the store of the new directory publishes it.
	s.dir.Store(&chunkDir{c: append(cs, c)})
	s.bytes.Add(grown)
	return true
}

// Alloc hands out a record for a new key, in this order: a freed one, a
// deferred one whose time has come (any of them, not only the oldest), a
// fresh one while fewer than MaxKeys records are handed out in the Table,
// or an idle one reclaimed on the spot (lazy reuse, see the package doc).
// now is a clock reading (never a caller's time: see "Reclamation").
// readyAt is a time from which the record's previous owner holds nothing
// (0 for a fresh record); the caller must not date the new key's state
// earlier. ok is false when none is available. Under the lock.
func (t *Table) Alloc(s *Shard, now int64) (ref uint32, readyAt int64, ok bool) {
	if s.freeHead == 0 {
		// Deferred records whose time has come: a constant number of
		// buckets to look at, whatever the number of records they hold.
		for i := range s.deferred {
			if b := &s.deferred[i]; b.head != 0 && b.until <= now {
				t.spliceFree(s, b)
			}
		}
	}
	if s.freeHead != 0 {
		ref = s.freeHead - 1
		rec, _ := t.Record(s, ref)
		s.freeHead = uint32(rec.Hash.Load())
		return ref, s.freeReady, true
	}
	if s.allocated < t.perShard && t.reserve() {
		if s.allocated >= s.allocatedCap(t) && !s.growChunks(t) {
			t.allocated.Add(-1)
			return 0, 0, false
		}
		ref = s.allocated
		s.allocated++
		return ref, 0, true
	}
	return t.reclaimOne(s, now)
}

// ClearIdleHint lets the next Alloc in the shard of h look for an idle
// record at once (a Reset has just made one idle).
func (t *Table) ClearIdleHint(h uint64) {
	s := t.Shard(h)
	s.Lock()
	s.idleHint = 0
	s.Unlock()
}

// reserve takes one record of the table-wide bound, if any is left. A CAS
// loop, because shards allocate under their own locks, concurrently.
func (t *Table) reserve() bool {
	for {
		a := t.allocated.Load()
		if a >= t.capacity {
			return false
		}
		if t.allocated.CompareAndSwap(a, a+1) {
			return true
		}
	}
}

// reclaimBudget is how many records an Alloc in a full shard examines for
// an idle one before giving up.
const reclaimBudget = 64

// reclaimOne frees one idle record of a full shard for a new key. Under the
// lock.
func (t *Table) reclaimOne(s *Shard, now int64) (ref uint32, readyAt int64, ok bool) {
	if t.idle == nil || now < s.idleHint || s.allocated == 0 {
		return 0, 0, false
	}
	soonest := int64(1<<63 - 1)
	for i := 0; i < min(reclaimBudget, int(s.allocated)); i++ {
		if s.cursor >= s.allocated {
			s.cursor = 0
		}
		r := s.cursor
		s.cursor++
		freed, at := t.tryFree(s, r, now, false)
		if freed {
			// Straight back out of the free list it was just put on.
			ref, readyAt, _ = t.Alloc(s, now)
			return ref, readyAt, true
		}
		if at > 0 {
			soonest = min(soonest, at)
		}
	}
	// Nothing idle among the records scanned: skip further scans until the
	// soonest of them goes idle, but look again after Rescan at the latest:
	// records elsewhere in the shard may go idle sooner.
	s.idleHint = min(soonest, now+min(t.rescan, 1<<63-1-now))
	return 0, 0, false
}

// tryFree is the one routine that frees a record holding a key (see the
// package doc for the protocol). It returns whether it freed record ref
// and, when it did not because the record is active, when it will be
// idle. Under the lock.
func (t *Table) tryFree(s *Shard, ref uint32, now int64, total bool) (freed bool, readyAt int64) {
	rec, _ := t.Record(s, ref)
	w := rec.State.Load()
	if w == t.free || t.transient != nil && t.transient(w) {
		// Free already, or being rewritten by a request (never freed, not
		// even by a total sweep: its plain stores would land in the next
		// owner's ring).
		return false, 0
	}
	// A fresh reading, after the load: the word cannot have been written at
	// a time later than this one by a request that read the clock.
	now = max(now, t.now())
	if idle, ready := t.idle(w, now); !idle && !total {
		return false, ready
	}
	// CAS, not Store: a request may have made the key active since the load.
	if !rec.State.CompareAndSwap(w, t.free) {
		return false, 0
	}
	t.Remove(s, rec.Hash.Load(), ref)
	t.Release(s, ref, now, now)
	t.reclaimed.Add(1)
	return true, 0
}

// Reclaimed returns how many idle records were freed so far (sweeps, lazy
// reuse).
func (t *Table) Reclaimed() uint64 { return t.reclaimed.Load() }

// Forget frees the record of hash h whether or not it is idle (a Reset):
// it is reusable from the time its state would have emptied by itself, as
// Idle tells, so that writers still acting on the old state find newer
// values in it. It reports whether h had a record.
func (t *Table) Forget(h uint64, now int64) bool {
	s := t.Shard(h)
	s.Lock()
	defer s.Unlock()
	ref, ok := t.Find(s, h)
	if !ok {
		return false
	}
	rec, _ := t.Record(s, ref)
	for {
		w := rec.State.Load()
		if t.transient != nil && t.transient(w) {
			// A request is rewriting the record with plain stores (package
			// ring's reset): freeing it now would let a new owner's state
			// be overwritten by stores still to come. The rewrite is Limit
			// stores and ends with a CAS nothing else can take: wait for it
			// without the lock.
			s.Unlock()
			runtime.Gosched()
			s.Lock()
			if ref, ok = t.Find(s, h); !ok {
				return false
			}
			rec, _ = t.Record(s, ref)
			continue
		}
		now := max(now, t.now())
		ready := now
		if t.idle != nil {
			if idle, at := t.idle(w, now); !idle {
				ready = max(now, at)
			}
		}
		if rec.State.CompareAndSwap(w, t.free) {
			t.Remove(s, h, ref)
			t.Release(s, ref, ready, now)
			return true
		}
	}
}

// sweepBatch bounds how many records a sweep examines per lock hold, so an
// insert into the shard being swept waits microseconds, not a whole sweep.
const sweepBatch = 512

// Sweep frees every idle record of the Table as of now, a clock reading
// (each judged with a fresh one, see the package doc), and returns how
// many it freed. With total, it frees every record whose word does not move
// under it, without reading its time: for a caller that knows every state
// was written far earlier than now (the clock jumped past all of them,
// further than packed times can tell apart) and that no key is created
// while it runs (package engine's wrap guard makes inserts wait for it).
func (t *Table) Sweep(now int64, total bool) int {
	if t.idle == nil {
		return 0
	}
	freedN := 0
	for i := range t.shards {
		s := &t.shards[i]
		for start := uint32(0); ; start += sweepBatch {
			s.Lock()
			n := s.allocated
			if start >= n {
				s.Unlock()
				break
			}
			for r := start; r < min(n, start+sweepBatch); r++ {
				if freed, _ := t.tryFree(s, r, now, total); freed {
					freedN++
				}
			}
			s.idleHint = 0 // records may go idle in any order: let lazy reuse look again
			s.Unlock()
		}
	}
	return freedN
}

// Insert adds h -> ref to the index of s, growing it past a load of 0.8.
func (t *Table) Insert(s *Shard, h uint64, ref uint32) {
	ix := s.index.Load()
	if (s.used+1)*5 > uint32(len(ix.e))*4 {
		ix = s.grow(ix, t)
	}
	i := home(h) & ix.mask
	for ix.e[i].Load() != 0 {
		i = (i + 1) & ix.mask
	}
	ix.e[i].Store(tag(h) | (ref + 1))
	s.used++
	s.live.Add(1)
}

// grow doubles the index. The new one is filled before it is published, so
// lookups see either the complete old index or the complete new one.
func (s *Shard) grow(old *index, t *Table) *index {
	ix := newIndex(2 * len(old.e))
	for i := range old.e {
		e := old.e[i].Load()
		if e == 0 {
			continue
		}
		rec, _ := t.Record(s, e&refMask-1)
		j := home(rec.Hash.Load()) & ix.mask
		for ix.e[j].Load() != 0 {
			j = (j + 1) & ix.mask
		}
		ix.e[j].Store(e)
	}
	s.index.Store(ix)
	s.bytes.Add(indexBytes(len(ix.e)) - indexBytes(len(old.e)))
	return ix
}

// Remove deletes h -> ref from the index of s (backward-shift deletion, so
// no tombstones accumulate under key churn). The record itself is left to
// the caller, who must Release it.
func (t *Table) Remove(s *Shard, h uint64, ref uint32) bool {
	ix := s.index.Load()
	want := tag(h) | (ref + 1)
	i := home(h) & ix.mask
	for {
		e := ix.e[i].Load()
		if e == 0 {
			return false
		}
		if e == want {
			break
		}
		i = (i + 1) & ix.mask
	}
	// Shift later entries of the cluster back into the hole. Each entry is
	// copied before its old place is reused, so a concurrent probe never
	// meets an empty slot inside the cluster before the final one.
	hole := i
	for j := (i + 1) & ix.mask; ; j = (j + 1) & ix.mask {
		e := ix.e[j].Load()
		if e == 0 {
			break
		}
		rec, _ := t.Record(s, e&refMask-1)
		k := home(rec.Hash.Load()) & ix.mask
		// e may move to the hole iff its home is not in (hole, j] cyclically.
		if (j > hole && (k <= hole || k > j)) || (j < hole && k <= hole && k > j) {
			ix.e[hole].Store(e)
			hole = j
		}
	}
	ix.e[hole].Store(0)
	s.used--
	s.live.Add(-1)
	return true
}

// Release returns a record whose key was removed from the index and whose
// State was set to the Table's Free word: reusable at once when readyAt <=
// now, else from readyAt on. A free record's Hash word holds the free-list
// link, so freed records cost no memory beyond their slab; a lock-free
// reader that still finds the record sees its Free State first.
func (t *Table) Release(s *Shard, ref uint32, readyAt, now int64) {
	if readyAt <= now {
		rec, _ := t.Record(s, ref)
		rec.Hash.Store(uint64(s.freeHead))
		s.freeHead = ref + 1
		s.freeReady = max(s.freeReady, readyAt)
		return
	}
	// Into the bucket of readyAt rounded up to a multiple of the width
	// (see Reclamation). The bucket's slot may still hold records due
	// deferBuckets or more widths earlier: with readyAt at most DeferSpan
	// = (deferBuckets-1) widths past now, those are reusable by now, so
	// they move to the free list first. A bucket of any other time (a
	// readyAt past DeferSpan, which the caller does not produce) merges,
	// reusable at the later time of the two: never early.
	e := readyAt / t.deferWidth
	if e*t.deferWidth < readyAt {
		e++
	}
	until := e * t.deferWidth
	if until < readyAt { // overflowed: the latest time there is
		until = 1<<63 - 1
	}
	b := &s.deferred[e%deferBuckets]
	if b.head != 0 && b.until != until && b.until <= now {
		t.spliceFree(s, b)
	}
	rec, _ := t.Record(s, ref)
	rec.Hash.Store(0)
	if b.head == 0 {
		b.head, b.until = ref+1, until
	} else {
		last, _ := t.Record(s, b.tail-1)
		last.Hash.Store(uint64(ref + 1))
		b.until = max(b.until, until)
	}
	b.tail = ref + 1
}

// spliceFree moves the records of bucket b to the free list. Under the lock.
func (t *Table) spliceFree(s *Shard, b *deferBucket) {
	last, _ := t.Record(s, b.tail-1)
	last.Hash.Store(uint64(s.freeHead))
	s.freeHead = b.head
	s.freeReady = max(s.freeReady, b.until)
	b.head, b.tail = 0, 0
}

// Allocated returns how many records of s have been handed out so far.
func (s *Shard) Allocated() int { return int(s.allocated) }
