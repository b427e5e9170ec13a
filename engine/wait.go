package engine

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// ErrExceedsLimit is returned by Wait and WaitN for a request that no amount
// of waiting admits: n <= 0, or n greater than the limit (a Decision with
// RetryAfter Never).
var ErrExceedsLimit = errors.New("engine: request can never be admitted (n <= 0 or n > Limit)")

// minWait is the shortest sleep between two attempts when a backend denies
// without saying when to retry (RetryAfter 0 on a denial it could admit
// later). It keeps WaitN from spinning on such a backend.
const minWait = time.Millisecond

// Wait is WaitN(ctx, rl, key, 1).
func Wait(ctx context.Context, rl RateLimiter, key string) error {
	return WaitN(ctx, rl, key, 1)
}

// WaitN blocks until n requests for key are admitted by rl (all at once, as
// AllowN admits them), or ctx ends. It returns nil once they are admitted
// and recorded. It is what users of golang.org/x/time/rate know as
// Limiter.WaitN, for per-key sliding windows and any backend.
//
// Each attempt is rl.AllowNContext; a denied attempt sleeps for the
// decision's RetryAfter (the exact time until the window has room for the
// exact log, the formula's time for the counter) and tries again, because
// another caller may take the room first. Waiting uses real time: with a
// Config.Clock that does not follow real time, schedule with AllowNAt
// instead.
//
// WaitN returns without consuming anything when:
//   - n can never be admitted (the decision's RetryAfter is Never, or
//     n <= 0 or n > the decision's Limit for a backend that does not say
//     Never): an error wrapping ErrExceedsLimit, at once;
//   - ctx ends while waiting: ctx.Err(), wrapped;
//   - ctx has a deadline that comes before the retry could pass: at once,
//     an error wrapping context.DeadlineExceeded (as x/time/rate does), so
//     a caller with a 100 ms budget is not kept 100 ms for nothing;
//   - the backend could not decide (a Redis fault) and its failure policy
//     denied: the backend's error, wrapped. Under FailOpen or FailLocal the
//     policy's admission counts as admitted and WaitN returns nil.
//
// WaitN is fair to no one in particular: waiters on one key race for room
// as it frees, as concurrent AllowN callers do; none is starved forever
// unless the key is kept full by others.
func WaitN(ctx context.Context, rl RateLimiter, key string, n int) error {
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("engine: wait for %q: %w", key, err)
		}
		d, err := rl.AllowNContext(ctx, key, n)
		if d.Allowed {
			return nil
		}
		if d.RetryAfter == Never || n <= 0 || (d.Limit > 0 && n > d.Limit) {
			return fmt.Errorf("engine: wait for %d on %q (limit %d): %w", n, key, d.Limit, ErrExceedsLimit)
		}
		if err != nil {
			if ce := ctx.Err(); ce != nil {
				return fmt.Errorf("engine: wait for %q: %w", key, ce)
			}
			return fmt.Errorf("engine: wait for %q: %w", key, err)
		}
		// Give up early only when the earliest admission itself falls after
		// the deadline; the floor on the sleep (minWait) is ours, not the
		// limit's, so it must not turn a retry that fits into a refusal.
		delay := max(d.RetryAfter, minWait)
		if dl, ok := ctx.Deadline(); ok {
			left := time.Until(dl)
			if left < d.RetryAfter {
				return fmt.Errorf("engine: wait for %q: retry in %v would pass the context deadline: %w",
					key, d.RetryAfter, context.DeadlineExceeded)
			}
			if delay > left {
				delay = d.RetryAfter // the floor would sleep past a deadline the retry fits under
			}
		}
		if timer == nil {
			timer = time.NewTimer(delay)
		} else {
			timer.Reset(delay)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("engine: wait for %q: %w", key, ctx.Err())
		case <-timer.C:
		}
	}
}

// Wait blocks until one request for key is admitted or ctx ends: see the
// package function WaitN.
func (l *Limiter) Wait(ctx context.Context, key string) error { return WaitN(ctx, l, key, 1) }

// WaitN blocks until n requests for key are admitted or ctx ends: see the
// package function WaitN.
func (l *Limiter) WaitN(ctx context.Context, key string, n int) error {
	return WaitN(ctx, l, key, n)
}
