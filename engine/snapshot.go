package engine

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"time"

	"github.com/slidelimit/slidelimit/atomiccounter"
	"github.com/slidelimit/slidelimit/gcra"
	"github.com/slidelimit/slidelimit/internal/keyhash"
	"github.com/slidelimit/slidelimit/shard"
)

// Errors of ReadFrom, for errors.Is. The error's message says which field
// or check failed.
var (
	// ErrSnapshotConfig: the snapshot is of a Limiter with another Config
	// (algorithm, Limit or Burst in force, Window, resolution, MaxLimit or
	// Penalty; the message names the first that differs). The key bound is
	// not compared: MaxMemory's bound depends on the number of shards, so on
	// GOMAXPROCS, and a restart on a machine with another CPU count must
	// keep its counts; a restoring Limiter bounded below the snapshot's
	// keys keeps the records it can hold.
	ErrSnapshotConfig = errors.New("engine: snapshot of another Config")
	// ErrSnapshotCorrupt: not a snapshot, truncated, a checksum that does
	// not match, or a record no Limiter writes.
	ErrSnapshotCorrupt = errors.New("engine: snapshot corrupt")
	// ErrSnapshotVersion: a snapshot format newer than this code reads.
	ErrSnapshotVersion = errors.New("engine: snapshot of a newer format version")
	// ErrSnapshotNotEmpty: ReadFrom on a Limiter that already tracks keys.
	ErrSnapshotNotEmpty = errors.New("engine: ReadFrom on a Limiter that tracks keys")
)

// SnapshotVersion is the snapshot format WriteTo writes (and the newest
// ReadFrom reads).
const SnapshotVersion = 1

// The snapshot format, all integers little-endian:
//
//	header (snapHeaderSize bytes):
//	  [0:8)     magic "SLIMSNAP"
//	  [8:12)    version (uint32)
//	  [12]      algorithm, [13] penalty, [14] GCRA burst follows the limit, [15] 0
//	  [16:64)   Limit in force, Burst in force, MaxLimit, Window ns,
//	            resolution ns (SlidingLog's tick, else 0), MaxKeys (uint64 each)
//	  [64:80)   the key hash's 128-bit key (package keyhash): a secret
//	  [80:88)   wall clock at the write (Unix ns)
//	  [88:96)   the Limiter's time at the write (ns since its epoch)
//	  [96:128)  GCRA's virtual clock piece t0, t1, u0 and deepest bucket (else 0)
//	  [128:132) words per record (2 for SlidingCounter and GCRA: hash,
//	            state; SlidingLog: 2 + (MaxLimit+1)/2, its ring two ticks a word)
//	  [132:136) keys the Limiter tracked at the start of the write (a
//	            sizing hint for the restorer, capped by its MaxKeys)
//	  [136:140) CRC-32C of bytes [0:136)
//	blocks: a uint32 count n (1 to snapBlockRecords(words)), then n
//	  records of 8 x words bytes; a count of 0 ends them
//	trailer: uint64 number of records, uint32 CRC-32C of every byte before it.
//
// Records are what the tables hold (a key's hash and its state words),
// dated in the writing Limiter's time.
const (
	snapHeaderSize = 140
	snapBlockBytes = 64 << 10 // a block's records: the reader's buffer, bounded by this or one record
)

var (
	snapMagic  = [8]byte{'S', 'L', 'I', 'M', 'S', 'N', 'A', 'P'}
	castagnoli = crc32.MakeTable(crc32.Castagnoli)
)

// snapBlockRecords is the most records a block holds: a buffer of
// snapBlockBytes, or one record if a record is larger.
func snapBlockRecords(words int) int { return max(1, snapBlockBytes/(8*words)) }

// snapshotter is what an algorithm gives a snapshot: its table's hash, a
// walk of its records, and the check and restore of one record (words:
// hash, state, then any ring words, as shard's Walk writes them).
type snapshotter interface {
	hasher() keyhash.Hasher
	setHasher(keyhash.Hasher)
	recordWords() int
	walk(c *shard.Cursor, dst []uint64) []uint64
	// valid reports whether rec is a record a table of this Config holds
	// (a live state word whose fields the algorithm can index with).
	valid(rec []uint64) bool
	// idleAt reports whether state word w holds nothing that counts at
	// rel or later (the table's idle test, without its readyAt).
	idleAt(w uint64, rel int64) bool
	// presize makes room for keys keys (a hint, within the Config's
	// bounds) in the unshared table.
	presize(keys int)
	// restore inserts rec into the (unshared) table at time rel; false:
	// no room.
	restore(rec []uint64, rel int64) bool
}

func (a *counterAlgo) hasher() keyhash.Hasher                      { return a.flat.Hasher() }
func (a *counterAlgo) setHasher(h keyhash.Hasher)                  { a.flat.SetHasher(h) }
func (a *counterAlgo) recordWords() int                            { return 2 }
func (a *counterAlgo) walk(c *shard.Cursor, dst []uint64) []uint64 { return a.flat.Walk(c, dst) }
func (a *counterAlgo) valid(rec []uint64) bool                     { return rec[0] > 1 && atomiccounter.Live(rec[1]) }
func (a *counterAlgo) idleAt(w uint64, rel int64) bool             { return a.counter.Idle(w, rel) }
func (a *counterAlgo) presize(keys int)                            { a.flat.Presize(keys) }
func (a *counterAlgo) restore(rec []uint64, rel int64) bool {
	return a.flat.Restore(rec[0], rec[1], rel)
}

func (a *gcraAlgo) hasher() keyhash.Hasher                      { return a.flat.Hasher() }
func (a *gcraAlgo) setHasher(h keyhash.Hasher)                  { a.flat.SetHasher(h) }
func (a *gcraAlgo) recordWords() int                            { return 2 }
func (a *gcraAlgo) walk(c *shard.Cursor, dst []uint64) []uint64 { return a.flat.Walk(c, dst) }
func (a *gcraAlgo) valid(rec []uint64) bool                     { return rec[0] > 1 && gcra.Live(rec[1]) }
func (a *gcraAlgo) idleAt(w uint64, rel int64) bool             { idle, _ := a.idle(w, rel); return idle }
func (a *gcraAlgo) presize(keys int)                            { a.flat.Presize(keys) }
func (a *gcraAlgo) restore(rec []uint64, rel int64) bool {
	return a.flat.Restore(rec[0], rec[1], rel)
}

func (a *logAlgo) hasher() keyhash.Hasher                      { return a.table.Hasher() }
func (a *logAlgo) setHasher(h keyhash.Hasher)                  { a.table.SetHasher(h) }
func (a *logAlgo) recordWords() int                            { return 2 + (a.table.SlotsPer()+1)/2 }
func (a *logAlgo) walk(c *shard.Cursor, dst []uint64) []uint64 { return a.table.Walk(c, dst) }
func (a *logAlgo) valid(rec []uint64) bool                     { return a.ring.Valid(rec[1]) }
func (a *logAlgo) idleAt(w uint64, rel int64) bool             { return a.ring.IsIdle(w, a.tick(rel)) }

// presize does nothing: a Table allocates records in chunks as keys come
// and its 4-byte index grows by doubling, a small part of a restore.
func (a *logAlgo) presize(int)                          {}
func (a *logAlgo) restore(rec []uint64, rel int64) bool { return a.table.Restore(rec, rel) }

// wallNow reads the wall clock (Unix ns) for a snapshot.
func (l *Limiter) wallNow() int64 {
	if l.wall != nil {
		return l.wall()
	}
	return time.Now().UnixNano()
}

// snapHeader is a snapshot's header, decoded.
type snapHeader struct {
	version                uint32
	alg                    Algorithm
	penalty, follows       bool
	limit, burst, maxLimit uint64
	window, res            int64
	maxKeys                uint64
	key                    [keyhash.KeySize]byte
	wall, mono             int64
	t0, t1, u0, deepest    int64
	words                  uint32
	keys                   uint32 // Len at the write: a sizing hint
}

func (h *snapHeader) encode(b []byte) {
	le := binary.LittleEndian
	copy(b[0:8], snapMagic[:])
	le.PutUint32(b[8:], h.version)
	b[12], b[13], b[14], b[15] = byte(h.alg), b2u(h.penalty), b2u(h.follows), 0
	for i, v := range []uint64{h.limit, h.burst, h.maxLimit, uint64(h.window), uint64(h.res), h.maxKeys} {
		le.PutUint64(b[16+8*i:], v)
	}
	copy(b[64:80], h.key[:])
	for i, v := range []int64{h.wall, h.mono, h.t0, h.t1, h.u0, h.deepest} {
		le.PutUint64(b[80+8*i:], uint64(v))
	}
	le.PutUint32(b[128:], h.words)
	le.PutUint32(b[132:], h.keys)
	le.PutUint32(b[136:], crc32.Checksum(b[:136], castagnoli))
}

func b2u(v bool) byte {
	if v {
		return 1
	}
	return 0
}

// decode parses a header: ErrSnapshotCorrupt for a wrong magic or header
// checksum, ErrSnapshotVersion for a newer version. The version is read
// before the checksum: a later version may lay out (and checksum) the
// rest of its header otherwise, and must still be reported as a version
// this code does not read, not as damage.
func (h *snapHeader) decode(b []byte) error {
	le := binary.LittleEndian
	if [8]byte(b[0:8]) != snapMagic {
		return fmt.Errorf("engine: not a snapshot (magic %q): %w", b[0:8], ErrSnapshotCorrupt)
	}
	h.version = le.Uint32(b[8:])
	if h.version > SnapshotVersion {
		return fmt.Errorf("engine: snapshot version %d, this code reads up to %d: %w", h.version, SnapshotVersion, ErrSnapshotVersion)
	}
	if got, want := le.Uint32(b[136:]), crc32.Checksum(b[:136], castagnoli); got != want {
		return fmt.Errorf("engine: snapshot header checksum %#08x, computed %#08x: %w", got, want, ErrSnapshotCorrupt)
	}
	if h.version == 0 || b[13] > 1 || b[14] > 1 || b[15] != 0 {
		return fmt.Errorf("engine: snapshot header fields out of range: %w", ErrSnapshotCorrupt)
	}
	h.alg, h.penalty, h.follows = Algorithm(b[12]), b[13] == 1, b[14] == 1
	f := [6]uint64{}
	for i := range f {
		f[i] = le.Uint64(b[16+8*i:])
	}
	h.limit, h.burst, h.maxLimit, h.window, h.res, h.maxKeys = f[0], f[1], f[2], int64(f[3]), int64(f[4]), f[5]
	copy(h.key[:], b[64:80])
	t := [6]int64{}
	for i := range t {
		t[i] = int64(le.Uint64(b[80+8*i:]))
	}
	h.wall, h.mono, h.t0, h.t1, h.u0, h.deepest = t[0], t[1], t[2], t[3], t[4], t[5]
	h.words = le.Uint32(b[128:])
	h.keys = le.Uint32(b[132:])
	return nil
}

// fingerprint is the header of l's Config (its limits in force), without
// the key, the times and GCRA's clock.
func (l *Limiter) fingerprint() snapHeader {
	c := l.Config()
	return snapHeader{version: SnapshotVersion, alg: c.Algorithm, penalty: c.Penalty,
		limit: uint64(c.Limit), burst: uint64(c.Burst), maxLimit: uint64(c.MaxLimit),
		window: int64(c.Window), res: l.res, maxKeys: uint64(c.MaxKeys),
		words: uint32(l.impl.(snapshotter).recordWords())}
}

// sameConfig names the first field in which snapshot s differs from l's
// Config (ErrSnapshotConfig), or returns nil.
func (l *Limiter) sameConfig(s *snapHeader) error {
	f := l.fingerprint()
	diff := func(field string, snap, here any) error {
		return fmt.Errorf("engine: snapshot %s %v, this Limiter's %v: %w", field, snap, here, ErrSnapshotConfig)
	}
	switch {
	case s.alg != f.alg:
		return diff("Algorithm", s.alg, f.alg)
	case s.window != f.window:
		return diff("Window", time.Duration(s.window), time.Duration(f.window))
	case s.limit != f.limit:
		return diff("Limit (in force)", s.limit, f.limit)
	case s.burst != f.burst:
		return diff("Burst (in force)", s.burst, f.burst)
	case s.maxLimit != f.maxLimit:
		return diff("MaxLimit", s.maxLimit, f.maxLimit)
	case s.res != f.res:
		return diff("resolution", time.Duration(s.res), time.Duration(f.res))
	case s.penalty != f.penalty:
		return diff("Penalty", s.penalty, f.penalty)
	case s.words != f.words:
		return fmt.Errorf("engine: snapshot records of %d words, this Config's %d: %w", s.words, f.words, ErrSnapshotCorrupt)
	}
	return nil
}

// crcWriter counts and checksums what passes through it.
type crcWriter struct {
	w   io.Writer
	crc uint32
	n   int64
}

func (c *crcWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.crc = crc32.Update(c.crc, castagnoli, p[:n])
	c.n += int64(n)
	return n, err
}

// WriteTo writes a snapshot of every key's state to w (io.WriterTo), for
// ReadFrom to restore into a new Limiter with the same Config, in this
// process or another. It returns the bytes written.
//
// The snapshot holds the secret key of the Limiter's key hash (package
// keyhash): whoever reads it can craft keys that share a victim's limit.
// Write it to a file only its owner can read (mode 0600), and never send
// it anywhere the Limiter's clients can read it.
//
// Consistency: with no decision running during WriteTo (after the server
// has stopped taking requests) the snapshot is exact. While decisions run,
// it is written in batches, each read under its shard's lock (so no key is
// freed, reused or moved while it is read) while requests keep deciding:
// each key's state is read atomically (one word; SlidingLog: its head and
// ring as one state) as of the moment its batch was read, so the snapshot
// misses exactly the requests each key admitted after its batch was read,
// and keys created after their shard's batch. A key is never half-written
// and never written from a state it did not hold.
//
// A SlidingLog key's ring is copied again while its head changes under
// the copy (a key admitting requests as fast as a 4 x MaxLimit-byte copy
// takes, which only Penalty's recorded denials reach, delays its batch),
// with its shard's lock let go every few tries: new keys of that shard
// are not held by it.
// SetLimit and SetBurst wait for a WriteTo in progress (the snapshot's
// limits and GCRA's clock are the ones its states were written under).
//
// Memory: a buffer of 64 KiB (or one SlidingLog record, if larger) and a
// bufio.Writer; nothing per key. Each shard's lock is held for one batch
// of up to 64 KiB of records at a time, never across a write to w.
func (l *Limiter) WriteTo(w io.Writer) (int64, error) {
	// The limits in force, and GCRA's clock, must be the ones the states
	// were written under: SetLimit and SetBurst wait for the write.
	l.setMu.Lock()
	defer l.setMu.Unlock()
	sn := l.impl.(snapshotter)
	rel := l.rel(l.now())
	if l.guardDue(rel) {
		// Every state must be readable at the write's time, and by the
		// restorer after the gap (see ReadFrom): run the wrap guard first.
		l.catchUp(rel)
		rel = l.rel(l.now())
	}
	h := l.fingerprint()
	h.key = sn.hasher().Key()
	h.wall, h.mono = l.wallNow(), rel
	h.keys = uint32(min(l.Len(), 1<<32-1))
	if a, ok := l.impl.(*gcraAlgo); ok {
		r := a.rate.Load()
		h.follows, h.t0, h.t1, h.u0, h.deepest = r.follows, r.t0, r.t1, r.u0, a.deepest.Load()
	}
	cw := &crcWriter{w: w}
	bw := bufio.NewWriterSize(cw, snapBlockBytes)
	var hb [snapHeaderSize]byte
	h.encode(hb[:])
	if _, err := bw.Write(hb[:]); err != nil {
		return cw.n, err
	}
	words := int(h.words)
	perBlock := snapBlockRecords(words)
	buf := make([]uint64, 0, perBlock*words)
	out := make([]byte, 0, 4+8*cap(buf))
	var c shard.Cursor
	total := uint64(0)
	for {
		recs := sn.walk(&c, buf)
		if len(recs) == 0 {
			break
		}
		out = binary.LittleEndian.AppendUint32(out[:0], uint32(len(recs)/words))
		for _, v := range recs {
			out = binary.LittleEndian.AppendUint64(out, v)
		}
		if _, err := bw.Write(out); err != nil {
			return cw.n, err
		}
		total += uint64(len(recs) / words)
	}
	out = binary.LittleEndian.AppendUint32(out[:0], 0)
	out = binary.LittleEndian.AppendUint64(out, total)
	if _, err := bw.Write(out); err != nil {
		return cw.n, err
	}
	if err := bw.Flush(); err != nil {
		return cw.n, err
	}
	out = binary.LittleEndian.AppendUint32(out[:0], cw.crc)
	_, err := cw.Write(out)
	return cw.n, err
}

// crcReader counts and checksums what is read through it.
type crcReader struct {
	r   io.Reader
	crc uint32
	n   int64
}

func (c *crcReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.crc = crc32.Update(c.crc, castagnoli, p[:n])
	c.n += int64(n)
	return n, err
}

// readFull is io.ReadFull, with a short read reported as a truncated
// snapshot.
func (c *crcReader) readFull(p []byte, what string) error {
	if _, err := io.ReadFull(c.r, p); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return fmt.Errorf("engine: snapshot truncated in its %s (after %d bytes): %w", what, c.n, ErrSnapshotCorrupt)
		}
		return fmt.Errorf("engine: reading snapshot: %w", err)
	}
	c.crc = crc32.Update(c.crc, castagnoli, p)
	c.n += int64(len(p))
	return nil
}

// ReadFrom restores a snapshot that WriteTo wrote (io.ReaderFrom) into l,
// which must be a new Limiter with the same Config that tracks no key yet,
// and returns the bytes read. It reads r to its end (bytes after the
// snapshot make it corrupt). No decision, Reset or SetLimit on l may run
// during ReadFrom: restore before serving. Stats and Len may (a metrics
// collector registered first): they see the empty tables until the
// restored ones are swapped in.
//
// Every key is aged by the wall-clock time between the write and this
// read: a key that had taken 4 of 5 in its window 10 s before the write
// has them 10 s + gap old after the restore, and keys whose state the gap
// emptied are not restored. The restored keys are dated on this
// Limiter's clock (its own, or Config.Clock): the restore moves the
// Limiter's epoch so that the clock's reading at the restore stands for
// the writer's reading at the write plus the gap. Callers that pass their
// own times (AllowAt and friends) keep reading this Limiter's clock (Now),
// as before: a time of the writer's clock means nothing here. If the wall
// clock reads earlier than at the write (it was stepped back), or either
// reading is before 2001-09-09 (a clock never set: they read 1970, 1980
// or 2000, and a writer's so made the gap decades long), the gap counts as
// 0: keys keep every count they had, so the restore never admits more
// than the Limiter would have (a wall clock stepped forward cannot be told
// from time that passed: it ages keys by the step). A gap of the wrap
// guard's span or more (SlidingCounter: 2^22 Windows, 48 days at 1 s;
// SlidingLog: 2^30 ticks, at least two Windows) empties every key, as the
// Limiter would have: none is restored, and the Limiter keeps its own
// time. GCRA counts the writer's time plus the gap only up to 9 years
// (2^58 ns, half the 18 years at which its time stops) past the epoch
// (keys then age less than the wall clock says, never more); a snapshot
// written past there restores no key, and the Limiter keeps its own time.
// Stats (Allowed, Denied, ...) start from zero.
//
// Errors, and what l is left with: ErrSnapshotNotEmpty if l tracks keys
// (l is untouched); ErrSnapshotConfig (the message names the field),
// ErrSnapshotCorrupt (truncated, checksum, garbage) or ErrSnapshotVersion;
// or the reader's error. On any error l is as it was before the call
// (usable, tracking no key): the snapshot is read into fresh tables, its
// checksum verified, and only then are they swapped in. Memory is bounded
// by the Config, never by a count in the file: records beyond MaxKeys (a
// snapshot written while keys came and went can hold more keys than were
// ever live at once) are dropped, the last ones in the file first.
func (l *Limiter) ReadFrom(r io.Reader) (int64, error) {
	cr := &crcReader{r: r}
	if n := l.Len(); n != 0 {
		return 0, fmt.Errorf("engine: ReadFrom on a Limiter tracking %d keys: %w", n, ErrSnapshotNotEmpty)
	}
	var hb [snapHeaderSize]byte
	if err := cr.readFull(hb[:], "header"); err != nil {
		return cr.n, err
	}
	var h snapHeader
	if err := h.decode(hb[:]); err != nil {
		return cr.n, err
	}
	if err := l.sameConfig(&h); err != nil {
		return cr.n, err
	}
	l.setMu.Lock() // no SetLimit while the limits are swapped
	defer l.setMu.Unlock()
	l.sweepMu.Lock() // the background sweep reads the clock and the tables under it
	defer l.sweepMu.Unlock()
	// The gap: wall time since the write, never negative (see the doc).
	gap := int64(0)
	if now := l.wallNow(); h.wall >= snapWallFloor && now > h.wall { // now > h.wall > 0: no overflow
		gap = now - h.wall
	}
	if h.mono < 0 {
		return cr.n, fmt.Errorf("engine: snapshot time %d: %w", h.mono, ErrSnapshotCorrupt)
	}
	at := satAdd(h.mono, gap)
	// keep: the gap leaves keys that may count. Past the guard's span every
	// key of a window algorithm is more than two Windows old (its newest
	// time was at most a Window past the write); a writer's time past
	// snapMaxTime is no running Limiter's (a clock 146 years on) and
	// restores nothing either, so the epoch never moves that far.
	keep := gap < l.guard && at <= snapMaxTime
	if h.alg == GCRA {
		at = min(at, gcraMaxTime/2)
		keep = h.mono <= gcraMaxTime/2
	}
	fresh, err := l.freshAlgo(&h)
	if err != nil {
		return cr.n, err
	}
	sn := fresh.(snapshotter)
	sn.setHasher(keyhash.FromKey(h.key))

	if keep {
		sn.presize(int(h.keys))
	}
	words := int(h.words)
	perBlock := snapBlockRecords(words)
	buf := make([]byte, 8*words*perBlock)
	rec := make([]uint64, words)
	var nb [4]byte
	total, restored := uint64(0), 0
	for {
		if err := cr.readFull(nb[:], "record blocks"); err != nil {
			return cr.n, err
		}
		n := int(binary.LittleEndian.Uint32(nb[:]))
		if n == 0 {
			break
		}
		if n > perBlock {
			return cr.n, fmt.Errorf("engine: snapshot block of %d records, at most %d: %w", n, perBlock, ErrSnapshotCorrupt)
		}
		b := buf[:8*words*n]
		if err := cr.readFull(b, "records"); err != nil {
			return cr.n, err
		}
		for i := 0; i < n; i++ {
			for j := range rec {
				rec[j] = binary.LittleEndian.Uint64(b[8*(i*words+j):])
			}
			if !sn.valid(rec) {
				return cr.n, fmt.Errorf("engine: snapshot record %d (hash %#x, state %#x) is no live key's: %w", total, rec[0], rec[1], ErrSnapshotCorrupt)
			}
			total++
			if keep && !sn.idleAt(rec[1], at) && sn.restore(rec, at) { // false: no room; dropped (see the doc)
				restored++
			}
		}
	}
	var tb [12]byte
	if err := cr.readFull(tb[:8], "trailer"); err != nil {
		return cr.n, err
	}
	if got := binary.LittleEndian.Uint64(tb[:8]); got != total {
		return cr.n, fmt.Errorf("engine: snapshot trailer counts %d records, blocks held %d: %w", got, total, ErrSnapshotCorrupt)
	}
	want := cr.crc
	if err := cr.readFull(tb[8:], "checksum"); err != nil {
		return cr.n, err
	}
	if got := binary.LittleEndian.Uint32(tb[8:]); got != want {
		return cr.n, fmt.Errorf("engine: snapshot checksum %#08x, computed %#08x: %w", got, want, ErrSnapshotCorrupt)
	}
	if n, _ := io.ReadFull(r, tb[:1]); n != 0 {
		return cr.n + 1, fmt.Errorf("engine: bytes after the snapshot's end (%d): %w", cr.n, ErrSnapshotCorrupt)
	}
	if restored == 0 {
		// No key came back: the snapshot's hash key has nothing to find,
		// and a fresh one keeps a key from a leaked old snapshot from
		// living on in every later one.
		sn.setHasher(keyhash.New())
	}
	if !keep {
		at = -1 // nothing restored: keep the Limiter's own time
	}
	l.publishRestored(fresh, at)
	return cr.n, nil
}

// freshAlgo builds empty tables for l's Config, with the snapshot's limits
// in force (equal to l's: sameConfig) and, for GCRA, its virtual clock
// piece (the restored Limiter takes the writer's time). A restore without
// keep uses them only to check the records: publishRestored keeps l's own
// tables and time, which the writer's piece does not describe (a piece set
// years into the writer's time, after a stretch at a lower limit, extended
// back to a time near 0 reads a virtual clock stopped at 0, under which no
// bucket ever refills). Under setMu and sweepMu; l.impl is left as it was.
func (l *Limiter) freshAlgo(h *snapHeader) (algo, error) {
	l.implMu.Lock()
	old := l.impl
	err := specOf(l.cfg.Algorithm).build(l) // sets l.impl (and bounds equal to the ones in force)
	fresh := l.impl
	l.impl = old
	l.implMu.Unlock()
	if err != nil {
		return nil, err
	}
	switch a := fresh.(type) {
	case *counterAlgo:
		a.limit.Store(int64(h.limit))
	case *logAlgo:
		a.limit.Store(int64(h.limit))
	case *gcraAlgo:
		if h.t0 < 0 || h.t1 < h.t0 || h.t1 > gcraMaxTime || h.u0 < 0 || h.u0 > gcraMaxTime || h.deepest < 0 || h.deepest > gcraMaxDepth {
			return nil, fmt.Errorf("engine: snapshot's GCRA clock (t0 %d, t1 %d, u0 %d, deepest %d) out of range: %w", h.t0, h.t1, h.u0, h.deepest, ErrSnapshotCorrupt)
		}
		r := a.newRate(int(h.limit), int(h.burst), h.follows, h.t0, h.t1, h.u0)
		a.rate.Store(r)
		a.deepen(max(h.deepest, r.rule.Depth))
	}
	return fresh, nil
}

// publishRestored swaps the restored tables in (under implMu, for Len and
// Stats) and moves the epoch so that the clock reads at (the writer's time
// plus the gap) now. Under setMu and sweepMu. Every restored state is
// live at at (not idle), as after a sweep at at: the wrap guard's next
// sweep is due a guard span later. at < 0: nothing was restored, and l
// keeps its own tables.
func (l *Limiter) publishRestored(fresh algo, at int64) {
	if at < 0 {
		// Nothing restored: keep New's tables, and with them a fresh hash
		// key, so that a key from a leaked old snapshot does not live on
		// in every later one.
		return
	}
	l.implMu.Lock()
	defer l.implMu.Unlock()
	clk := l.now()
	if clk >= 0 || clk-minInt64 >= at {
		l.epoch = clk - at
	} else {
		l.epoch = minInt64 // the clock reads then less than at: the keys count as newer (never admits more)
	}
	l.impl = fresh
	l.horizon.Store(l.rel(clk))
	l.sweepDue.Store(satAdd(l.rel(clk), l.guard))
}

const minInt64 = -1 << 63

// snapWallFloor is the earliest wall-clock reading (Unix ns) ReadFrom
// takes as a time: 10^18 ns, 2001-09-09T01:46:40Z, years before any
// snapshot was written and after the dates a clock that was never set
// reads (1970 with no battery-backed clock, 1980 and 2000 for common RTC
// defaults). A writer's reading before it would make the gap to a clock
// set since then decades long and forget every key.
const snapWallFloor = 1_000_000_000_000_000_000

// snapMaxTime bounds a restored Limiter's time (ns since its epoch): 2^62,
// 146 years, so that no time the engine adds to it saturates.
const snapMaxTime = 1 << 62
