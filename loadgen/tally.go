package loadgen

import (
	"sync"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"
)

// Histogram range: 1 ns to 60 s with 3 significant digits (0.1 % error).
// A latency above 60 s is recorded as 60 s (and is counted in clamped).
const (
	histMin    = 1
	histMax    = 60_000_000_000
	histDigits = 3
)

func newHist() *hdrhistogram.Histogram { return hdrhistogram.New(histMin, histMax, histDigits) }

// tally is what one sender observed during one interval.
type tally struct {
	lat     *hdrhistogram.Histogram // latency: from the intended start (open loop) or the call (closed loop)
	svc     *hdrhistogram.Histogram // service time: from the actual start of the call
	late    *hdrhistogram.Histogram // open loop: actual start - intended start (lat - svc)
	allowed uint64
	denied  uint64
	errors  uint64
	clamped uint64
}

func newTally() *tally { return &tally{lat: newHist(), svc: newHist(), late: newHist()} }

func (t *tally) sent() uint64 { return t.allowed + t.denied + t.errors }

func (t *tally) reset() {
	t.lat.Reset()
	t.svc.Reset()
	t.late.Reset()
	t.allowed, t.denied, t.errors, t.clamped = 0, 0, 0, 0
}

// merge adds o into t.
func (t *tally) merge(o *tally) {
	t.lat.Merge(o.lat)
	t.svc.Merge(o.svc)
	t.late.Merge(o.late)
	t.allowed += o.allowed
	t.denied += o.denied
	t.errors += o.errors
	t.clamped += o.clamped
}

func record(h *hdrhistogram.Histogram, v int64) (clamped bool) {
	if v < histMin {
		v = histMin
	}
	if v > histMax {
		v, clamped = histMax, true
	}
	_ = h.RecordValue(v) // cannot fail: v is within the histogram's range
	return clamped
}

// sender is one goroutine's recording slot. The sender records into cur
// under mu; once per interval the reporter swaps cur with spare (holding mu
// only for the swap) and merges the old one at leisure, so a sender never
// waits for a histogram merge.
type sender struct {
	mu       sync.Mutex
	cur      *tally
	spare    *tally // owned by the reporter
	firstErr error
}

func newSender() *sender { return &sender{cur: newTally(), spare: newTally()} }

func (s *sender) record(lat, svc int64, allowed bool, err error) {
	s.mu.Lock()
	t := s.cur
	c := record(t.lat, lat)
	if svc >= 0 {
		record(t.svc, svc)
		record(t.late, lat-svc)
	}
	if c {
		t.clamped++
	}
	switch {
	case err != nil:
		t.errors++
		if s.firstErr == nil {
			s.firstErr = err
		}
	case allowed:
		t.allowed++
	default:
		t.denied++
	}
	s.mu.Unlock()
}

// swap installs the spare tally and returns the one the sender recorded
// into since the last swap; only the reporter calls it, and it must hand
// the tally back with giveBack once it has merged it.
func (s *sender) swap() *tally {
	s.mu.Lock()
	old := s.cur
	s.cur = s.spare
	s.mu.Unlock()
	return old
}

// giveBack resets t and makes it the spare for the next swap.
func (s *sender) giveBack(t *tally) {
	t.reset()
	s.spare = t
}

func (s *sender) err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.firstErr
}
