package engine

import (
	"errors"
	"fmt"
)

// ErrInvalidLimit is wrapped by the errors of SetLimit and SetBurst for a
// value out of range (the error names the parameter and the range).
var ErrInvalidLimit = errors.New("engine: invalid limit")

// ErrNoBurst is wrapped by SetBurst's error on an algorithm whose burst is
// its limit (SlidingLog, SlidingCounter): change the limit instead.
var ErrNoBurst = errors.New("engine: the algorithm has no burst of its own")

func errNoBurst(a Algorithm) error {
	return fmt.Errorf("engine: SetBurst on %v (its burst is its limit; use SetLimit): %w", a, ErrNoBurst)
}

// SetLimit changes the limit (requests per Window) of a running Limiter.
// It is safe with concurrent decisions: each decision is made wholly under
// the old limit or wholly under the new one (those that read the limit
// before the change count as made before it). Every key keeps its state:
// nothing is forgotten or counted twice across the change.
//
//   - SlidingLog: every key's ring holds its last Config.MaxLimit requests
//     (fixed at New: 4 bytes each per key), so limit may be anything in
//     [1, MaxLimit], and the new limit is judged exactly against the same
//     history. A key holding more admitted requests in its window than a
//     lowered limit is denied until its window holds fewer than the new
//     limit, and its RetryAfter says exactly when that is.
//   - SlidingCounter: limit in [1, Config.MaxLimit] (default
//     MaxCounterLimit); the key's two window counts stay and the formula
//     weighs them against the new limit. A key above a lowered limit is
//     denied until its estimate falls below it.
//   - GCRA: limit in [1, Config.MaxLimit] (default Limit). The rate
//     changes from now on, and every key keeps its debt in requests: a key
//     that had taken 4 of its bucket of 5 still has taken 4 of it after
//     SetLimit(10) (with the default Burst the bucket follows the limit:
//     6 more now). A key further in debt than a smaller bucket holds waits
//     until it has paid down to it, at the new rate. Below MaxLimit the
//     virtual clock runs slower by under 0.5 % (see Config.MaxLimit).
//     Per-call limits run on the real clock and keep their counts.
//
// A value out of range is refused with an error wrapping ErrInvalidLimit
// that names the parameter and MaxLimit; the limit in force is unchanged.
// Config() reports the limit in force.
func (l *Limiter) SetLimit(limit int) error {
	l.setMu.Lock()
	defer l.setMu.Unlock()
	if limit < 1 || limit > l.cfg.MaxLimit {
		return fmt.Errorf("engine: SetLimit(%d): limit must be in [1, %d] (Config.MaxLimit, fixed at New): %w", limit, l.cfg.MaxLimit, ErrInvalidLimit)
	}
	return l.impl.setLimit(limit)
}

// SetBurst changes GCRA's bucket (Config.Burst) on a running Limiter, with
// the guarantees of SetLimit: every key keeps its debt, and one deeper in
// debt than a smaller bucket holds waits until it has paid down to it.
// From then on the burst no longer follows SetLimit. burst must be in [1,
// MaxGCRALimit], with burst x Window/MaxLimit at most GCRA's largest
// bucket (see Config.Burst); otherwise the error wraps ErrInvalidLimit.
// On SlidingLog and SlidingCounter, whose burst is their limit, it returns
// an error wrapping ErrNoBurst.
func (l *Limiter) SetBurst(burst int) error {
	l.setMu.Lock()
	defer l.setMu.Unlock()
	return l.impl.setBurst(burst)
}
