package engine

import "slices"

// manyGroup is how many keys AllowMany fetches before deciding any: enough
// independent cache misses to keep the memory system busy (a core tracks
// a few dozen outstanding misses), few enough that the group's lines are
// still in cache when its decisions run.
const manyGroup = 16

// AllowMany decides one request for each of keys, in order, as that many
// calls of Allow at one moment would (one clock reading for the batch),
// and appends the answers to dst, which it returns. It does not allocate
// when dst has room for len(keys) more answers and the keys exist
// (creating keys may grow tables, as Allow does).
//
// It is for a caller that has many keys to decide at once (a batch of
// requests, a fan-out): when the keys' state is not in the CPU caches
// (many keys, drawn at random), it is faster than a loop of Allow, because
// it hashes a group of keys and loads each one's slot before deciding any,
// so that the cache misses of independent keys overlap instead of
// following one another. A key that appears twice is decided twice.
func (l *Limiter) AllowMany(dst []bool, keys []string) []bool {
	dst = slices.Grow(dst, len(keys))
	rel := l.rel(l.now())
	var hs [manyGroup]uint64
	for len(keys) > 0 {
		g := keys[:min(len(keys), manyGroup)]
		keys = keys[len(g):]
		if rel >= l.sweepDue.Load() {
			l.catchUp(rel)
		}
		if l.flat != nil {
			for i, k := range g {
				hs[i] = l.flat.Hash(k)
				l.flat.Touch(hs[i])
			}
			for i := range g {
				dst = append(dst, l.allowCounter(hs[i], rel))
			}
			continue
		}
		for i, k := range g {
			hs[i] = l.table.Hash(k)
			l.table.Touch(hs[i])
		}
		for i := range g {
			dst = append(dst, l.allowLog(hs[i], rel))
		}
	}
	return dst
}
