package engine

import "context"

// The in-memory Limiter never waits, so its Context variants ignore ctx:
// they cost what the plain calls cost (no ctx.Err() load, no allocation)
// and never return an error. They exist so that *Limiter satisfies
// RateLimiter beside the network backends.

var _ RateLimiter = (*Limiter)(nil)

// AllowNContext is AllowN; ctx is ignored and the error is always nil.
func (l *Limiter) AllowNContext(_ context.Context, key string, n int) (Decision, error) {
	return l.AllowN(key, n), nil
}

// PeekContext is Peek; ctx is ignored and the error is always nil.
func (l *Limiter) PeekContext(_ context.Context, key string) (Decision, error) {
	return l.Peek(key), nil
}

// ResetContext is Reset; ctx is ignored and the error is always nil.
func (l *Limiter) ResetContext(_ context.Context, key string) error {
	l.Reset(key)
	return nil
}
