package redisstore

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/internal/redistest"
)

// TestRoundTripOfUnendingContextAllocatesNoTimer: a round trip whose
// caller's context cannot end (AllowN's context.Background) gets its
// deadline without a context.WithDeadline of its own (a timer armed and
// stopped, and four allocations, per call): at most one allocation, the
// call's context, even when go-redis asks for its Done as it does on every
// command.
func TestRoundTripOfUnendingContextAllocatesNoTimer(t *testing.T) {
	srv := redistest.Start(t)
	s := newStore(t, Config{Client: newClient(t, srv.Addr()), Algorithm: engine.SlidingCounter, Limit: 10,
		Window: time.Second, Timeout: time.Second})
	ctx := context.Background()
	send := func(ctx context.Context, _ time.Time) error {
		select {
		case <-ctx.Done():
			return ctx.Err()
		default:
		}
		if _, ok := ctx.Deadline(); !ok {
			return errors.New("no deadline")
		}
		return nil
	}
	if err := s.roundTrip(ctx, send); err != nil {
		t.Fatal(err)
	}
	if a := testing.AllocsPerRun(1000, func() { _ = s.roundTrip(ctx, send) }); a > 1 {
		t.Fatalf("%v allocations per round trip, want at most 1", a)
	}
}

// TestCallContextEndsAtOrBeforeItsDeadline: the context a call without a
// caller's deadline runs under has the exact deadline (now + Timeout, for
// the sockets), and its Done, shared with other calls, closes no earlier
// than Timeout/16 before that deadline (timers never fire early) and no
// later than it; Err is nil until Done is closed and DeadlineExceeded
// after.
func TestCallContextEndsAtOrBeforeItsDeadline(t *testing.T) {
	srv := redistest.Start(t)
	const timeout = 160 * time.Millisecond // about deadlines
	s := newStore(t, Config{Client: newClient(t, srv.Addr()), Algorithm: engine.SlidingCounter, Limit: 10,
		Window: time.Second, Timeout: timeout})
	for range 3 {
		before := time.Now()
		var dl time.Time
		var closed time.Time
		err := s.roundTrip(context.Background(), func(ctx context.Context, deadline time.Time) error {
			d, ok := ctx.Deadline()
			if !ok || !d.Equal(deadline) {
				t.Errorf("context deadline %v (%v), want the call's %v", d, ok, deadline)
			}
			dl = d
			if ctx.Err() != nil {
				select {
				case <-ctx.Done():
				default:
					t.Error("Err is not nil while Done is open")
				}
			}
			select {
			case <-ctx.Done():
				closed = time.Now()
			case <-time.After(10 * time.Second):
				t.Fatal("Done not closed 10 s after a deadline of 160 ms")
			}
			if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
				t.Errorf("Err after Done = %v, want DeadlineExceeded", ctx.Err())
			}
			return nil
		})
		after := time.Now()
		if err != nil {
			t.Fatal(err)
		}
		if dl.Before(before.Add(timeout)) || dl.After(after.Add(timeout)) {
			t.Fatalf("deadline %v after the call started, want Timeout %v", dl.Sub(before), timeout)
		}
		if early := dl.Sub(closed); early > timeout/16 {
			t.Fatalf("Done closed %v before the deadline, want at most Timeout/16 = %v", early, timeout/16)
		}
	}
}

// TestDoneSlotsEndAtOrBeforeTheDeadline: a deadline gets the slot that
// ends at or before it, the latest two slots are shared by the deadlines
// that fall in them (concurrent calls' deadlines arrive slightly out of
// order), an older one gets none (the call then uses its own
// WithDeadline), and a slot that has already ended is closed.
func TestDoneSlotsEndAtOrBeforeTheDeadline(t *testing.T) {
	d := newDoneSlots(160 * time.Millisecond)
	size := d.size // 10 ms
	now := 1000 * size
	a := d.done(now+15*size+3, now) // slot ending at now+15*size
	if a == nil || d.cur.Load().end != now+15*size {
		t.Fatalf("slot end %d, want %d", d.cur.Load().end, now+15*size)
	}
	if d.done(now+15*size+size-1, now) != a {
		t.Fatal("two deadlines in one slot got different channels")
	}
	b := d.done(now+16*size, now)
	if b == nil || b == a {
		t.Fatal("the next slot did not get a channel of its own")
	}
	if d.done(now+15*size+1, now) != a {
		t.Fatal("a deadline in the slot before the latest did not get that slot")
	}
	if d.done(now+14*size+1, now) != nil {
		t.Fatal("a deadline older than the latest two slots got a channel")
	}
	past := d.done(now+20*size, now+21*size) // ended already
	select {
	case <-past:
	default:
		t.Fatal("a slot that has already ended is not closed")
	}
	if newDoneSlots(15*time.Millisecond).size != 0 {
		t.Fatal("slots used for a Timeout below 16 ms")
	}
}
