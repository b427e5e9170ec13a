package engine

import "time"

// verdict is a Decision without Allowed, which travels beside it as a
// result of its own: the algorithms return (ok bool, v verdict), and the
// Limiter's exported methods build the Decision once, where they return
// it.
//
// Why not Decision itself: it has five fields (40 bytes), more than the
// compiler keeps in registers as one value (at most four fields, 32
// bytes). Every function that returned a Decision it got from a call
// stored the five result registers to its frame one field at a time and
// copied them with 16-byte loads, which cannot be forwarded from the
// narrower stores just made and stall until those reach the cache. AllowN
// passed its Decision up four such levels (decide, the algorithm's take,
// Limiter.take, AllowN): in a chain of four non-inlined calls a Decision
// cost 52 ns and (bool, verdict) 15.6 ns on the shared 2-core machine,
// about 9 ns a level. (bool, verdict) travels in five registers.
//
// The exported methods spell the Decision literal in their return
// statement: a helper that returns it, even inlined, builds it in a
// temporary and adds the copy back.
type verdict struct {
	limit, remaining int
	retry, reset     time.Duration
}
