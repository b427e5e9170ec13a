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
	return l.impl.allowMany(dst, keys, l.rel(l.now()))
}

// guardCheck runs the wrap guard's sweep if it is due at rel: AllowMany's
// implementations call it before each group.
func (l *Limiter) guardCheck(rel int64) {
	if rel >= l.sweepDue.Load() {
		l.catchUp(rel)
	}
}
