package offheap

import "unsafe"

// sizeClasses are the Go allocator's size classes for small objects (at
// most 32 KiB), from the runtime's sizeclasses.go; unchanged from Go 1.21
// to 1.26. A small allocation takes the smallest class that holds it.
var sizeClasses = [...]uint16{8, 16, 24, 32, 48, 64, 80, 96, 112, 128, 144, 160, 176, 192, 208, 224, 240, 256, 288, 320, 352, 384, 416, 448, 480, 512, 576, 640, 704, 768, 896, 1024, 1152, 1280, 1408, 1536, 1792, 2048, 2304, 2688, 3072, 3200, 3456, 4096, 4864, 5376, 6144, 6528, 6784, 6912, 8192, 9472, 9728, 10240, 10880, 12288, 13568, 14336, 16384, 18432, 19072, 20480, 21760, 24576, 27264, 28672, 32768}

// allocPage is the unit a large allocation (over 32 KiB) is rounded to.
const allocPage = 8 << 10

// HeapBytes returns the bytes of Go heap that one allocation of n bytes
// of pointer-free memory takes: n rounded up to its size class, or to
// whole 8 KiB pages past 32 KiB. (Objects with pointers over 512 bytes
// carry an 8-byte header besides; callers add it.) Callers that bound
// memory count allocations with it, so that their counts match what the
// runtime reports.
func HeapBytes(n int64) int64 {
	if n <= 0 {
		return 0
	}
	if n > int64(sizeClasses[len(sizeClasses)-1]) {
		return (n + allocPage - 1) / allocPage * allocPage
	}
	lo, hi := 0, len(sizeClasses)-1
	for lo < hi {
		mid := (lo + hi) / 2
		if int64(sizeClasses[mid]) < n {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return int64(sizeClasses[lo])
}

// HeapSlabBytes returns the Go heap that the words of New(words, Heap)
// take, with the slack that aligns them. The Slab itself (SlabBytes) is
// not counted: a caller that keeps only Words lets it go.
func HeapSlabBytes(words int) int64 {
	return HeapBytes(int64(words+align/wordBytes-1) * int64(wordBytes))
}

// SlabBytes is the heap a Slab struct takes.
var SlabBytes = HeapBytes(int64(unsafe.Sizeof(Slab{})))
