package offheap

import (
	"errors"
	"fmt"
	"math"
	"unsafe"
)

// Kind is the kind of memory a slab is made of.
type Kind uint8

const (
	// Auto asks for the fastest kind available: MmapHuge, except in -race
	// builds (see the package doc) and where mmap is unavailable (Heap).
	Auto Kind = iota
	// Heap is a plain Go slice.
	Heap
	// Mmap is an anonymous mapping with the OS's default (4 KiB) pages.
	Mmap
	// MmapHuge is an anonymous 2 MiB-aligned mapping advised MADV_HUGEPAGE.
	MmapHuge
)

func (k Kind) String() string {
	switch k {
	case Auto:
		return "auto"
	case Heap:
		return "heap"
	case Mmap:
		return "mmap-4k"
	case MmapHuge:
		return "mmap-huge"
	}
	return fmt.Sprintf("offheap.Kind(%d)", uint8(k))
}

const (
	// align is the alignment of Words' first element: a cache line, so that
	// 16-byte slots never straddle two lines.
	align = 64
	// HugePageSize is the size of a transparent huge page on x86-64 and on
	// arm64 with 4 KiB base pages; a MmapHuge slab's words start on such a
	// boundary so that the kernel can back all of it with huge pages.
	HugePageSize = 2 << 20
	wordBytes    = int(unsafe.Sizeof(uint64(0)))
)

// MaxWords is the largest slab New accepts: 2^44 words (128 TiB) on 64-bit
// systems, below their address-space limit, so that an absurd size is an
// ErrSize, not a runtime panic in make; just under 2 GiB on 32-bit ones.
const MaxWords = min(1<<44, (math.MaxInt-2*HugePageSize)/8) // 8: bytes per word

// ErrSize reports a slab size New cannot allocate (zero, negative, or more
// bytes than an int holds).
var ErrSize = errors.New("offheap: invalid size")

// Slab is a run of zeroed uint64 words. See the package doc for the rules.
type Slab struct {
	words   []uint64
	mapping []byte // the whole mmap'd region, nil for Heap
	kind    Kind
}

// New returns a slab of n zeroed words of kind k, or of the kind it falls
// back to (Slab.Kind). It fails on n <= 0, on sizes that overflow, and when
// the OS refuses the mapping (the error wraps the errno, e.g. ENOMEM).
func New(n int, k Kind) (*Slab, error) {
	if n <= 0 || n > MaxWords {
		return nil, fmt.Errorf("%w: words must be in [1, %d], got %d", ErrSize, MaxWords, n)
	}
	if k > MmapHuge {
		return nil, fmt.Errorf("offheap: unknown kind %d", uint8(k))
	}
	if k == Auto {
		k = MmapHuge
		if raceEnabled {
			k = Heap
		}
	}
	if k != Heap && mmapSupported {
		return newMapped(n, k)
	}
	return newHeap(n), nil
}

func newHeap(n int) *Slab {
	buf := make([]uint64, n+align/wordBytes-1)
	// Large Go allocations are page-aligned already; this covers the rest.
	off := 0
	if r := uintptr(unsafe.Pointer(&buf[0])) % align; r != 0 {
		off = int(align-r) / wordBytes
	}
	return &Slab{words: buf[off : off+n : off+n], kind: Heap}
}

// Words returns the slab's words. Nil after Free.
func (s *Slab) Words() []uint64 { return s.words }

// Kind returns the kind of memory granted (never Auto).
func (s *Slab) Kind() Kind { return s.kind }

// Bytes is the size of the words in bytes (not of the mapping, which a
// MmapHuge slab rounds up to whole huge pages).
func (s *Slab) Bytes() int64 { return int64(len(s.words)) * int64(wordBytes) }

// Free releases the memory; see the package doc for what it invalidates.
func (s *Slab) Free() error {
	s.words = nil
	m := s.mapping
	s.mapping = nil
	if m == nil {
		return nil
	}
	if err := unmap(m); err != nil {
		return fmt.Errorf("offheap: munmap %d bytes: %w", len(m), err)
	}
	return nil
}
