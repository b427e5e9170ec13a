//go:build !(linux && (amd64 || arm64))

package offheap

// No mmap path on this platform: every kind falls back to Heap.
var mmapSupported = false

func newMapped(n int, _ Kind) (*Slab, error) { return newHeap(n), nil }

func unmap([]byte) error { return nil }

// AnonHugeBytes is -1: slabs are never mmap'd on this platform.
func (s *Slab) AnonHugeBytes() int64 { return -1 }

// thpMode and madvise mirror the Linux hooks so that the tests build here;
// they are never called (mmapSupported is false).
var (
	thpMode = func() string { return "" }
	madvise = func([]byte, int) error { return nil }
)
