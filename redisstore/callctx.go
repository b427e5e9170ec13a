package redisstore

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// A round trip's context when the caller's cannot end (its Done is nil:
// context.Background, as AllowN uses). context.WithDeadline would give
// each call a timer, armed and stopped, and four allocations: in the
// Redis benchmark's CPU profile (2 goroutines, GOMAXPROCS 2) WithDeadline
// and its cancel took about 6% of the client's CPU per decision. go-redis
// needs of the context only its deadline, for the socket's read and write
// deadlines, and its Done where it waits: for a turn of its connection
// pool when every connection is busy, while dialing, and (a
// ClusterClient) in the backoff before it resends a command (MaxRedirects:
// see the package doc's Deadlines). So callCtx carries the exact deadline
// and takes its Done from slots shared by the Store's calls: one channel
// per slot of Timeout/16 of the Store's
// monotonic clock, closed by one timer at the slot's end, and a call is
// given the slot that ends at or before its deadline. Its waits therefore
// end at most Timeout/16 before the deadline, never after it (the bound
// Timeout holds), its sockets' deadlines are exact, and a busy Store arms
// sixteen timers per Timeout instead of one per call. (One channel per
// millisecond, closed by a ticking goroutine, was tried before and cost
// more than it saved: a timer, a goroutine and a thread wake-up each
// millisecond, busy or not.)
type callCtx struct {
	context.Context // the caller's (Done nil): its values
	deadline        time.Time
	done            <-chan struct{}
}

func (c *callCtx) Deadline() (time.Time, bool) { return c.deadline, true }
func (c *callCtx) Done() <-chan struct{}       { return c.done }

// Err is DeadlineExceeded once Done is closed, nil before (the
// context.Context contract: Err is non-nil exactly when Done is closed).
func (c *callCtx) Err() error {
	select {
	case <-c.done:
		return context.DeadlineExceeded
	default:
		return nil
	}
}

// minSlot is the shortest slot: below it (a Timeout under 16 ms) calls
// use context.WithDeadline, as the timers of shorter slots would fire
// more often than once a millisecond.
const minSlot = time.Millisecond

// doneSlots are a Store's shared Done channels (see callCtx): the latest
// two slots, since concurrent calls' deadlines arrive slightly out of
// order.
type doneSlots struct {
	size     int64 // slot length in ns; 0: slots not used
	mu       sync.Mutex
	cur, old atomic.Pointer[doneSlot]
}

// doneSlot is the channel that closes at end (ns of the Store's
// monotonic clock, Store.mono).
type doneSlot struct {
	end int64
	ch  chan struct{}
}

func newDoneSlots(timeout time.Duration) doneSlots {
	if timeout/16 < minSlot {
		return doneSlots{}
	}
	return doneSlots{size: int64(timeout / 16)}
}

// done returns the channel of the slot ending at or before dl (ns of the
// Store's monotonic clock; now is that clock's reading), or nil when that
// slot is older than the latest two (a call that waited long between
// taking its deadline and asking): the caller then uses WithDeadline.
func (d *doneSlots) done(dl, now int64) <-chan struct{} {
	end := dl - dl%d.size
	if p := d.cur.Load(); p != nil && p.end == end {
		return p.ch
	}
	if p := d.old.Load(); p != nil && p.end == end {
		return p.ch
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	cur := d.cur.Load()
	if cur != nil && cur.end == end {
		return cur.ch
	}
	if cur != nil && cur.end > end {
		return nil // older than the latest slot and not the one before
	}
	s := &doneSlot{end: end, ch: make(chan struct{})}
	if wait := end - now; wait > 0 {
		time.AfterFunc(time.Duration(wait), func() { close(s.ch) })
	} else {
		close(s.ch)
	}
	d.old.Store(cur)
	d.cur.Store(s)
	return s.ch
}
