package httplimit

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"

	"github.com/slidelimit/slidelimit/engine"
)

// ErrRuleNotRestored is wrapped by each per-rule error of ReadFrom: a
// rule of the snapshot whose state was not restored (no rule of the
// Middleware has its name, its backend is no longer an in-memory
// engine.Limiter, or its limiter refused the state: another Config,
// wrapping engine.ErrSnapshotConfig, and so on). That rule starts empty;
// the snapshot's other rules are restored.
var ErrRuleNotRestored = errors.New("httplimit: rule not restored from the snapshot")

// Snapshot container. A Middleware's snapshot wraps one engine snapshot
// per in-memory limiter, so that ReadFrom can find each rule's part by
// name, skip the part of a rule that is gone or changed without reading
// it into anything, and keep going: each part is framed in checksummed
// chunks, so its length need not be known before the engine has written
// it (the write streams; nothing holds a second copy of a table).
//
// All integers are little-endian.
//
//	header   magic      [8]byte  "SLMWSNAP"
//	         version    uint16   snapVersion
//	         reserved   uint16   0
//	         records    uint32   number of records that follow
//	         crc        uint32   CRC-32C of the 16 bytes above
//	record   nameLen    uint8    1..64
//	         name       [nameLen]byte  the rule's name ([A-Za-z0-9_.-])
//	         flags      uint8    bit 0: keys are namespaced ("name\x00key":
//	                             a ready Rule.Limiter); other bits 0
//	         crc        uint32   CRC-32C of nameLen, name and flags
//	         chunk*     len uint32 (1..chunkMax) | crc uint32 | data[len]
//	         end        len uint32 = 0           | crc uint32
//
// A chunk's crc is the running CRC-32C of the record's data up to and
// including that chunk, and the end marker's is that of all of it, so a
// flipped, dropped or reordered chunk is caught before its bytes reach
// the engine (which checks its own checksum over the whole part too).
// The file ends after the last record: trailing bytes are corruption.
const (
	snapMagic     = "SLMWSNAP"
	snapVersion   = 1
	snapHeaderLen = 20
	chunkHead     = 8
	// chunkMax bounds one chunk's data: the buffer each of WriteTo and
	// ReadFrom holds, and what a corrupt length can make ReadFrom read
	// before its checksum fails.
	chunkMax = 64 << 10
	// flagNamespaced marks a record whose keys carry the rule's name
	// prefix (a ready Limiter): restored only into a rule that is keyed
	// the same way, or no lookup would ever find them.
	flagNamespaced = 1
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// snapTarget is one in-memory limiter of the Middleware, named by the
// first rule (in Rules, Default, Preflight order) that decides on it.
type snapTarget struct {
	name       string
	l          *engine.Limiter
	namespaced bool
}

// snapTargets lists the Middleware's in-memory limiters, each once.
func (m *Middleware) snapTargets() []snapTarget {
	var ts []snapTarget
	seen := map[*engine.Limiter]bool{}
	add := func(ru *rule) {
		if ru == nil || ru.adj == nil || seen[ru.adj] {
			return
		}
		seen[ru.adj] = true
		ts = append(ts, snapTarget{name: ru.name, l: ru.adj, namespaced: ru.ns != ""})
	}
	for i := range m.rules {
		add(&m.rules[i])
	}
	add(m.def)
	add(m.preflight)
	return ts
}

// WriteTo writes a snapshot of the state of every rule whose backend is
// an in-memory engine.Limiter (built from Rule.Engine, or a ready
// *engine.Limiter given as Rule.Limiter; a limiter several rules share is
// written once, under the first one's name) to w, for ReadFrom in a later
// process. Rules on other backends (a redisstore.Store keeps its state in
// Redis) are not in it. Each rule's part is engine.Limiter.WriteTo's, with
// its guarantees: exact when no request is decided while it runs (after
// the server stopped taking requests and those in flight finished), and
// while serving within the engine's stated bound for a concurrent
// snapshot.
//
// The snapshot holds each limiter's key-hash secret (see
// engine.Limiter.WriteTo): whoever reads it can aim hash collisions at a
// client's key, so keep it as private as the process's memory (a file of
// mode 0600).
func (m *Middleware) WriteTo(w io.Writer) (int64, error) {
	if m.closed.Load() {
		return 0, errors.New("httplimit: WriteTo on a closed Middleware")
	}
	// SetLimit and SetBurst wait: each part's Config is one setting.
	m.liveMu.Lock()
	defer m.liveMu.Unlock()
	ts := m.snapTargets()
	cw := &countWriter{w: w}
	var hdr [snapHeaderLen]byte
	copy(hdr[:8], snapMagic)
	binary.LittleEndian.PutUint16(hdr[8:], snapVersion)
	binary.LittleEndian.PutUint32(hdr[12:], uint32(len(ts)))
	binary.LittleEndian.PutUint32(hdr[16:], crc32.Checksum(hdr[:16], castagnoli))
	if _, err := cw.Write(hdr[:]); err != nil {
		return cw.n, fmt.Errorf("httplimit: WriteTo: %w", err)
	}
	chw := &chunkWriter{w: cw, buf: make([]byte, chunkHead+chunkMax)}
	for _, t := range ts {
		if _, err := cw.Write(recordHead(t.name, t.namespaced)); err != nil {
			return cw.n, fmt.Errorf("httplimit: WriteTo: rule %q: %w", t.name, err)
		}
		chw.crc, chw.n = 0, 0
		if _, err := t.l.WriteTo(chw); err != nil {
			return cw.n, fmt.Errorf("httplimit: WriteTo: rule %q: %w", t.name, err)
		}
		if err := chw.end(); err != nil {
			return cw.n, fmt.Errorf("httplimit: WriteTo: rule %q: %w", t.name, err)
		}
	}
	return cw.n, nil
}

// recordHead encodes a record's name, flags and their checksum.
func recordHead(name string, namespaced bool) []byte {
	b := make([]byte, 0, 1+len(name)+1+4)
	b = append(b, byte(len(name)))
	b = append(b, name...)
	var flags byte
	if namespaced {
		flags |= flagNamespaced
	}
	b = append(b, flags)
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

// ReadFrom restores a snapshot WriteTo wrote (in this process or an
// earlier one) into this Middleware's in-memory limiters, reading r to
// its end. Call it on a new Middleware before it decides any request:
// each limiter must be empty (engine.Limiter.ReadFrom), and requests
// decided meanwhile would see a rule's keys appear at once.
//
// A rule is matched by name; its state is restored whole or not at all.
// Each rule of the snapshot that is not restored is reported in the
// returned error (joined, each wrapping ErrRuleNotRestored and the
// cause: no rule of this name, a backend that is not in memory, keys
// namespaced differently, or the limiter's own refusal, such as
// engine.ErrSnapshotConfig for a rule whose algorithm, limit or window
// changed) and starts empty; the others are restored. Rules of the
// Middleware that the snapshot does not name start empty, without error.
//
// A damaged container (not a snapshot, a bad checksum, a truncated file,
// trailing bytes) stops the restore with an error wrapping
// engine.ErrSnapshotCorrupt, one of a later format version with
// engine.ErrSnapshotVersion: rules read before the damage keep their
// restored state, the rest start empty. ReadFrom never panics on any
// input; besides what the limiters restore it holds one chunk (64 KiB).
func (m *Middleware) ReadFrom(r io.Reader) (int64, error) {
	if m.closed.Load() {
		return 0, errors.New("httplimit: ReadFrom on a closed Middleware")
	}
	m.liveMu.Lock()
	defer m.liveMu.Unlock()
	cr := &countReader{r: r}
	records, err := readSnapHeader(cr)
	if err != nil {
		return cr.n, err
	}
	var errs []error
	done := map[*engine.Limiter]string{}
	chr := &chunkReader{r: cr, buf: make([]byte, chunkMax)}
	for i := uint32(0); i < records; i++ {
		name, namespaced, err := readRecordHead(cr, i)
		if err != nil {
			return cr.n, errors.Join(append(errs, err)...)
		}
		chr.reset(name)
		if err := m.restoreRule(chr, name, namespaced, done); err != nil {
			errs = append(errs, fmt.Errorf("httplimit: ReadFrom: rule %q: %w: %w", name, err, ErrRuleNotRestored))
		}
		// What the limiter did not read (a skipped rule's whole part) is
		// read through and checked, so the next record starts in step.
		if err := chr.drain(); err != nil {
			return cr.n, errors.Join(append(errs, err)...)
		}
	}
	var one [1]byte
	switch n, err := io.ReadFull(cr, one[:]); {
	case n > 0:
		errs = append(errs, corruptf("trailing bytes after the last of %d records", records))
	case err != io.EOF:
		errs = append(errs, fmt.Errorf("httplimit: ReadFrom: %w", err))
	}
	return cr.n, errors.Join(errs...)
}

// restoreRule restores one record into the rule named name, or says why
// not. A chunk framing error (chr.err) is left for drain to report.
func (m *Middleware) restoreRule(chr *chunkReader, name string, namespaced bool, done map[*engine.Limiter]string) error {
	ru := m.byName[name]
	switch {
	case ru == nil:
		return errors.New("no rule of this Middleware has this name")
	case ru.adj == nil:
		return fmt.Errorf("its backend is a %T now, not an in-memory *engine.Limiter", ru.rl)
	case (ru.ns != "") != namespaced:
		if namespaced {
			return errors.New("its keys were a ready Limiter's (prefixed with the rule name), and now the rule owns its limiter")
		}
		return errors.New("its keys were those of a limiter the rule owned, and now it has a ready Limiter (its keys are prefixed with the rule name)")
	case done[ru.adj] != "":
		return fmt.Errorf("its limiter is rule %q's, restored from an earlier record", done[ru.adj])
	}
	if _, err := ru.adj.ReadFrom(chr); err != nil {
		if chr.err != nil {
			// The framing failed under the engine; drain reports how.
			return errors.New("its part of the snapshot is damaged")
		}
		return err
	}
	done[ru.adj] = name
	return nil
}

func corruptf(format string, args ...any) error {
	return fmt.Errorf("httplimit: ReadFrom: "+format+": %w", append(args, engine.ErrSnapshotCorrupt)...)
}

// truncated turns an early end of the snapshot into corruption; other
// read errors (I/O) are passed on as they are.
func truncated(what string, err error) error {
	if err == io.EOF || err == io.ErrUnexpectedEOF {
		return corruptf("truncated in %s", what)
	}
	return fmt.Errorf("httplimit: ReadFrom: reading %s: %w", what, err)
}

func readSnapHeader(r io.Reader) (uint32, error) {
	var hdr [snapHeaderLen]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		if err == io.EOF {
			return 0, corruptf("empty input, not a snapshot")
		}
		return 0, truncated("the header", err)
	}
	if string(hdr[:8]) != snapMagic {
		return 0, corruptf("not a httplimit snapshot (magic %q, want %q)", hdr[:8], snapMagic)
	}
	// The version is checked before the checksum: a later version may lay
	// out the rest of its header otherwise.
	if v := binary.LittleEndian.Uint16(hdr[8:]); v != snapVersion {
		if v > snapVersion {
			return 0, fmt.Errorf("httplimit: ReadFrom: snapshot format version %d, this build reads %d: %w", v, snapVersion, engine.ErrSnapshotVersion)
		}
		return 0, corruptf("snapshot format version %d does not exist", v)
	}
	if got, want := crc32.Checksum(hdr[:16], castagnoli), binary.LittleEndian.Uint32(hdr[16:]); got != want {
		return 0, corruptf("header checksum %08x, want %08x", got, want)
	}
	if binary.LittleEndian.Uint16(hdr[10:]) != 0 {
		return 0, corruptf("reserved header bits set")
	}
	return binary.LittleEndian.Uint32(hdr[12:]), nil
}

func readRecordHead(r io.Reader, i uint32) (name string, namespaced bool, err error) {
	var b [1 + 64 + 1 + 4]byte
	what := fmt.Sprintf("record %d's head", i)
	if _, err := io.ReadFull(r, b[:1]); err != nil {
		return "", false, truncated(what, err)
	}
	n := int(b[0])
	if n < 1 || n > 64 {
		return "", false, corruptf("%s: name length %d is not in [1, 64]", what, n)
	}
	if _, err := io.ReadFull(r, b[1:1+n+1+4]); err != nil {
		return "", false, truncated(what, err)
	}
	if got, want := crc32.Checksum(b[:1+n+1], castagnoli), binary.LittleEndian.Uint32(b[1+n+1:]); got != want {
		return "", false, corruptf("%s: checksum %08x, want %08x", what, got, want)
	}
	name = string(b[1 : 1+n])
	flags := b[1+n]
	if !validName(name) || flags&^flagNamespaced != 0 {
		return "", false, corruptf("%s: name %q or flags %#x out of range", what, name, flags)
	}
	return name, flags&flagNamespaced != 0, nil
}

// chunkWriter frames what an engine snapshot writes into chunks of at
// most chunkMax bytes, each preceded by its length and the record's
// running checksum, buffered in one chunk's room (one Write per chunk).
type chunkWriter struct {
	w   io.Writer
	buf []byte // chunkHead bytes of room for the chunk's head, then its data
	n   int    // data bytes buffered
	crc uint32 // CRC-32C of the record's data flushed so far
	err error
}

func (c *chunkWriter) Write(p []byte) (int, error) {
	if c.err != nil {
		return 0, c.err
	}
	written := 0
	for len(p) > 0 {
		k := copy(c.buf[chunkHead+c.n:], p)
		c.n += k
		p = p[k:]
		written += k
		if c.n == chunkMax {
			if err := c.flush(); err != nil {
				return written, err
			}
		}
	}
	return written, nil
}

func (c *chunkWriter) flush() error {
	data := c.buf[chunkHead : chunkHead+c.n]
	c.crc = crc32.Update(c.crc, castagnoli, data)
	binary.LittleEndian.PutUint32(c.buf[0:], uint32(c.n))
	binary.LittleEndian.PutUint32(c.buf[4:], c.crc)
	_, err := c.w.Write(c.buf[:chunkHead+c.n])
	c.n = 0
	if err != nil {
		c.err = err
	}
	return err
}

// end flushes the last chunk and writes the record's end marker.
func (c *chunkWriter) end() error {
	if c.err != nil {
		return c.err
	}
	if c.n > 0 {
		if err := c.flush(); err != nil {
			return err
		}
	}
	var e [chunkHead]byte
	binary.LittleEndian.PutUint32(e[4:], c.crc)
	_, err := c.w.Write(e[:])
	return err
}

// chunkReader reads one record's data, chunk by chunk, checking each
// chunk's checksum before handing out any of its bytes, and gives io.EOF
// at the record's end marker.
type chunkReader struct {
	r    io.Reader
	buf  []byte
	data []byte // the current chunk's unread bytes
	crc  uint32
	rule string
	done bool  // the end marker was read
	err  error // a framing error (corruption, truncation, I/O): the container cannot go on
}

func (c *chunkReader) reset(rule string) {
	c.data, c.crc, c.rule, c.done, c.err = nil, 0, rule, false, nil
}

func (c *chunkReader) Read(p []byte) (int, error) {
	for len(c.data) == 0 {
		if c.done {
			return 0, io.EOF
		}
		if c.err != nil {
			return 0, c.err
		}
		if err := c.next(); err != nil {
			c.err = err
			return 0, err
		}
	}
	n := copy(p, c.data)
	c.data = c.data[n:]
	return n, nil
}

func (c *chunkReader) next() error {
	var h [chunkHead]byte
	what := fmt.Sprintf("rule %q's state", c.rule)
	if _, err := io.ReadFull(c.r, h[:]); err != nil {
		return truncated(what, err)
	}
	n, sum := binary.LittleEndian.Uint32(h[0:]), binary.LittleEndian.Uint32(h[4:])
	if n > chunkMax {
		return corruptf("%s: chunk of %d bytes, at most %d", what, n, chunkMax)
	}
	if n == 0 {
		if sum != c.crc {
			return corruptf("%s: end marker checksum %08x, want %08x", what, sum, c.crc)
		}
		c.done = true
		return nil
	}
	if _, err := io.ReadFull(c.r, c.buf[:n]); err != nil {
		return truncated(what, err)
	}
	crc := crc32.Update(c.crc, castagnoli, c.buf[:n])
	if crc != sum {
		return corruptf("%s: chunk checksum %08x, want %08x", what, crc, sum)
	}
	c.crc, c.data = crc, c.buf[:n]
	return nil
}

// drain reads the record to its end marker, checking every chunk.
func (c *chunkReader) drain() error {
	for {
		c.data = nil
		if c.done {
			return nil
		}
		if c.err != nil {
			return c.err
		}
		if err := c.next(); err != nil {
			c.err = err
			return err
		}
	}
}

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

type countReader struct {
	r io.Reader
	n int64
}

func (c *countReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}
