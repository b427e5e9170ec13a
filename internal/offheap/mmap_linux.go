//go:build linux && (amd64 || arm64)

package offheap

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"syscall"
	"unsafe"
)

// mmapSupported is a variable, not a constant, so that tests can take the
// fallback path on a platform that has mmap.
var mmapSupported = true

// madvise and thpMode are variables for the same reason: tests make the
// kernel refuse the advice or report THP off.
var (
	madvise = syscall.Madvise
	thpMode = readTHPMode
)

// readTHPMode returns the selected mode of transparent huge pages
// ("always", "madvise", "never"), or "" when the kernel has no THP.
func readTHPMode() string {
	b, err := os.ReadFile("/sys/kernel/mm/transparent_hugepage/enabled")
	if err != nil {
		return ""
	}
	// The file reads like "always [madvise] never": the bracketed one is on.
	i, j := bytes.IndexByte(b, '['), bytes.IndexByte(b, ']')
	if i < 0 || j < i {
		return ""
	}
	return string(b[i+1 : j])
}

func newMapped(n int, k Kind) (*Slab, error) {
	size := n * wordBytes
	if k == MmapHuge {
		if m := thpMode(); m != "always" && m != "madvise" {
			k = Mmap
		}
	}
	length := roundUp(size, os.Getpagesize())
	mapLen := length
	if k == MmapHuge {
		// Map one huge page more than needed and use the 2 MiB-aligned part:
		// the kernel can only put a huge page on an aligned 2 MiB range. The
		// unused head and tail are never touched, so they cost address space,
		// not memory.
		length = roundUp(size, HugePageSize)
		mapLen = length + HugePageSize
	}
	m, err := syscall.Mmap(-1, 0, mapLen, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANON)
	if err != nil {
		return nil, fmt.Errorf("offheap: mmap %d bytes: %w", mapLen, err)
	}
	off := 0
	if k == MmapHuge {
		addr := uintptr(unsafe.Pointer(&m[0]))
		off = int((addr+HugePageSize-1)&^(HugePageSize-1) - addr)
		if err := madvise(m[off:off+length], syscall.MADV_HUGEPAGE); err != nil {
			// EINVAL from a kernel built without THP: 4 KiB pages it is.
			k = Mmap
		}
	}
	// Safety: m[off:] holds at least size bytes, off is a multiple of the
	// page size so the words are aligned, and the mapping outlives the slice
	// until Free (the package's contract).
	words := unsafe.Slice((*uint64)(unsafe.Pointer(&m[off])), n)
	return &Slab{words: words, mapping: m, kind: k}, nil
}

func unmap(m []byte) error { return syscall.Munmap(m) }

func roundUp(n, to int) int { return (n + to - 1) / to * to }

// AnonHugeBytes returns how many bytes of the slab the kernel currently
// backs with transparent huge pages (AnonHugePages in /proc/self/smaps,
// summed over the mappings that overlap the slab's words, capped at Bytes),
// or -1 when that cannot be read or the slab is not mmap'd. The kernel
// accounts per mapping and merges adjacent mappings with equal flags, so a
// huge slab next to another may be credited with its neighbour's pages: an
// estimate for tests and benchmark reports (it reads a procfs file), not a
// figure for a hot path.
func (s *Slab) AnonHugeBytes() int64 {
	if s.mapping == nil || len(s.words) == 0 {
		return -1
	}
	lo := uint64(uintptr(unsafe.Pointer(&s.words[0])))
	hi := lo + uint64(s.Bytes())
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		return -1
	}
	defer f.Close()
	var total int64
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Bytes()
		if start, end, ok := parseRange(line); ok {
			in = start < hi && end > lo
			continue
		}
		if in && bytes.HasPrefix(line, []byte("AnonHugePages:")) {
			fields := bytes.Fields(line)
			if len(fields) >= 2 {
				kb, err := strconv.ParseInt(string(fields[1]), 10, 64)
				if err == nil {
					total += kb << 10
				}
			}
		}
	}
	if sc.Err() != nil {
		return -1
	}
	return min(total, s.Bytes())
}

// parseRange parses the "start-end perms ..." header line of a smaps entry.
func parseRange(line []byte) (start, end uint64, ok bool) {
	sp := bytes.IndexByte(line, ' ')
	if sp < 0 {
		return 0, 0, false
	}
	dash := bytes.IndexByte(line[:sp], '-')
	if dash < 0 {
		return 0, 0, false
	}
	start, err1 := strconv.ParseUint(string(line[:dash]), 16, 64)
	end, err2 := strconv.ParseUint(string(line[dash+1:sp]), 16, 64)
	return start, end, err1 == nil && err2 == nil
}
