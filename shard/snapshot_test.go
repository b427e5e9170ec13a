package shard

import (
	"sync/atomic"
	"testing"
	"time"
)

// TestWalkWaitsForARingBeingRewrittenWithoutTheShardLock: Walk cannot
// copy a Table record whose ring a request is rewriting in place
// (Config.Transient), nor one whose state word keeps moving under the
// copy (a hot key with a large ring); it tries again. Between tries it
// must let go of its shard's lock, as Forget does for the same wait:
// otherwise every new key of the shard (Alloc and Insert take the lock)
// waits for as long as the rewrite, or the key's burst, lasts.
func TestWalkWaitsForARingBeingRewrittenWithoutTheShardLock(t *testing.T) {
	const slots = 64
	const rewriting = 1 << 40 // the state word of a ring being rewritten
	var busy atomic.Bool
	busy.Store(true)
	tab := New(Config{Shards: 1, MaxKeys: 16, SlotsPer: slots,
		Transient: func(w uint64) bool { return w == rewriting && busy.Load() }})
	rec := make([]uint64, 2+(slots+1)/2)
	rec[0], rec[1] = 7, rewriting
	if !tab.Restore(rec, 0) {
		t.Fatal("no room for the key")
	}
	walked := make(chan int)
	go func() {
		var c Cursor
		n := 0
		for dst := make([]uint64, 0, len(rec)); ; {
			got := tab.Walk(&c, dst)
			if len(got) == 0 {
				break
			}
			n += len(got) / len(rec)
		}
		walked <- n
	}()
	// Let the walk reach the key (had it not, the insert would only come
	// first, and the test would show nothing).
	time.Sleep(100 * time.Millisecond)
	inserted := make(chan struct{})
	go func() {
		other := make([]uint64, len(rec))
		other[0], other[1] = 9, 2
		tab.Restore(other, 0) // a new key in the same shard
		close(inserted)
	}()
	select {
	case <-inserted:
	case <-time.After(10 * time.Second): // generous: unblocked, it takes microseconds
		t.Error("a new key waited 10 s for the shard's lock while Walk waited for a ring being rewritten")
	}
	busy.Store(false) // the rewrite ends
	if n := <-walked; n < 1 {
		t.Errorf("the walk wrote %d records, want the key it waited for", n)
	}
	<-inserted
}
