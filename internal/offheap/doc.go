// Package offheap hands out zeroed, pointer-free slabs of uint64 words for
// key tables that must not cost the garbage collector anything and want as
// few TLB misses per lookup as the OS allows.
//
// # Kinds
//
//   - Heap: a plain Go slice. Works everywhere; the GC never scans it (it
//     holds no pointers) but it is part of the Go heap, so it counts towards
//     GOGC's heap goal, and on Linux with transparent huge pages in
//     "madvise" mode (the common default) it is backed by 4 KiB pages: a
//     random lookup in a table of a few hundred MB misses the TLB.
//   - Mmap: an anonymous private mapping from mmap(2), outside the Go heap
//     (no GC pacing cost), 4 KiB pages.
//   - MmapHuge: Mmap, 2 MiB-aligned and advised MADV_HUGEPAGE, so that the
//     kernel backs it with 2 MiB pages where it can: one TLB entry covers
//     512 times more table.
//
// Size: a Heap slab is a make, so a size the machine cannot hold ends the
// process as any failed Go allocation does; mmap'd kinds return the
// kernel's ENOMEM as an error. Callers bound the size first (the engine's
// MaxMemory); MaxWords only rejects sizes no platform could map.
//
// New never fails because a kind is unsupported: where mmap is not
// available (not Linux, not a 64-bit platform we build the mmap path for)
// it falls back to Heap; where huge pages are unavailable (THP "never",
// madvise refused) MmapHuge falls back to Mmap. Slab.Kind says what was
// granted. New fails only when the memory itself cannot be had.
//
// # Race detector
//
// The race detector only watches memory in the Go heap and data segments;
// accesses (atomic ones included) to an mmap'd region are not checked. So
// Auto picks Heap in -race builds, which keeps the concurrent code that
// uses a slab under the detector's eye; an explicit Mmap or MmapHuge is
// still honoured.
//
// # Invariants and contracts
//
//   - Words of a new slab are zero and 64-byte aligned (a 16-byte slot never
//     straddles a cache line).
//   - A slab must never hold Go pointers (the GC does not see mmap'd memory,
//     so a pointer stored there would not keep its object alive). Uint64
//     words only, which the API enforces by type.
//   - Free unmaps the memory: any slice obtained from Words before Free is
//     dangling afterwards and touching it faults. The owner frees once, when
//     no goroutine can still read the slab (engine Close after its readers
//     are gone). There is no finalizer: a slab that is only reachable through
//     Words' slice would be unmapped under its readers.
//   - Free is not safe for concurrent use with itself; a second Free is a no-op.
package offheap
