package measure

import "testing"

var sink [][]*int

func TestSinceChargesWhatWasAllocated(t *testing.T) {
	const n = 10_000
	before := Take()
	// n pointer-bearing objects of 8 pointers (64 bytes) each: the heap and
	// the scannable heap must both grow by at least that much.
	objs := make([][]*int, n)
	for i := range objs {
		objs[i] = make([]*int, 8)
	}
	sink = objs
	pk := Since(before, n)
	sink = nil
	if pk.Bytes < 64 {
		t.Errorf("heap bytes per object = %.1f, want >= 64", pk.Bytes)
	}
	if pk.ScanBytes < 64 {
		t.Errorf("scannable bytes per object = %.1f, want >= 64", pk.ScanBytes)
	}
	if pk.GCCycle < 0 {
		t.Errorf("GC cycle time difference = %v, want >= 0", pk.GCCycle)
	}
}

func TestSinceNeverNegative(t *testing.T) {
	sink = make([][]*int, 100_000)
	before := Take()
	sink = nil // the next snapshot has less live heap than before
	pk := Since(before, 0)
	if pk.Bytes != 0 || pk.ScanBytes != 0 {
		t.Errorf("freed heap reads as %+v, want zero bytes", pk)
	}
}
