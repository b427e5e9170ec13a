package redisstore

import (
	"context"
	"sync/atomic"
	"time"
)

// callContext returns the context a call to Redis runs under: parent with
// deadline. go-redis reads its Deadline for the socket's read and write
// deadlines and selects on its Done while waiting for a pooled connection.
//
// A parent that can be cancelled gets context.WithDeadline. Most calls come
// from AllowN, Peek and Reset, whose parent is context.Background and can
// never end: for those a deadlineCtx does the same job without a timer of
// its own per call (context.WithDeadline allocates four times and starts and
// stops a runtime timer for every decision). Its Done is shared by every
// call whose deadline falls in the same millisecond (see doneTicks).
func (s *Store) callContext(parent context.Context, deadline time.Time) (context.Context, context.CancelFunc) {
	if parent.Done() != nil {
		return context.WithDeadline(parent, deadline)
	}
	return &deadlineCtx{Context: parent, deadline: deadline, done: s.done.at(deadline)}, noCancel
}

func noCancel() {}

// deadlineCtx is a context that ends at deadline and has no other way to
// end (its parent cannot be cancelled). Deadline is exact; Done closes at
// most a millisecond later, and Err turns non-nil when Done closes, as
// context.Context requires.
type deadlineCtx struct {
	context.Context // the parent, for Value
	deadline        time.Time
	done            <-chan struct{}
}

func (c *deadlineCtx) Deadline() (time.Time, bool) { return c.deadline, true }
func (c *deadlineCtx) Done() <-chan struct{}       { return c.done }
func (c *deadlineCtx) Err() error {
	select {
	case <-c.done:
		return context.DeadlineExceeded
	default:
		return nil
	}
}

// doneTicks hands out channels that close at whole milliseconds: at(d)
// returns one that closes at d rounded up to the millisecond. Deadlines of
// a Store's calls are now + Timeout, so they only move forward and one
// current tick serves every call of that millisecond: a decision rate of
// 20,000/s allocates one channel and one timer per 20 calls.
type doneTicks struct {
	cur atomic.Pointer[doneTick]
}

type doneTick struct {
	at int64 // Unix ms at which ch closes
	ch chan struct{}
}

func (d *doneTicks) at(deadline time.Time) <-chan struct{} {
	ms := (deadline.UnixNano() + int64(time.Millisecond) - 1) / int64(time.Millisecond)
	for {
		t := d.cur.Load()
		if t != nil && t.at == ms {
			return t.ch
		}
		if t != nil && t.at > ms {
			// An earlier deadline than the current tick's (a shorter
			// caller budget cannot reach here, but a clock step can): a
			// tick of its own.
			return newTick(ms).ch
		}
		n := newTick(ms)
		if d.cur.CompareAndSwap(t, n) {
			return n.ch
		}
		// Another caller moved the tick: n's timer still closes n.ch,
		// which nobody holds; try again with theirs.
	}
}

func newTick(ms int64) *doneTick {
	t := &doneTick{at: ms, ch: make(chan struct{})}
	time.AfterFunc(time.Until(time.UnixMilli(ms)), func() { close(t.ch) })
	return t
}
