package engine

import (
	"errors"
	"strings"
	"testing"
)

// TestSetBurstOverflowSaysTheRealBucketSize: a burst whose bucket overflows
// the nanosecond range is refused naming the bucket's real size, not the
// saturated MaxInt64 ns (2562047h47m16.854775807s) the multiply stopped at.
func TestSetBurstOverflowSaysTheRealBucketSize(t *testing.T) {
	l := newLimiter(t, Config{Algorithm: GCRA, Limit: 1, Window: MaxWindow})
	err := l.SetBurst(MaxGCRALimit)
	if !errors.Is(err, ErrInvalidLimit) {
		t.Fatalf("SetBurst(MaxGCRALimit) at one per MaxWindow: %v, want ErrInvalidLimit", err)
	}
	if strings.Contains(err.Error(), "2562047h47m16.854775807s") {
		t.Errorf("error %q names the saturated duration, not the bucket's size", err)
	}
	if got := l.Config().Burst; got != 1 {
		t.Errorf("Burst after a refused SetBurst = %d, want 1 (unchanged)", got)
	}
}
