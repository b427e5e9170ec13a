package engine

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"
)

// A snapshot of a later format version is refused as such (so that an
// operator who rolled a binary back is told so, not that the file is
// damaged), whatever that version made of the rest of its header: its
// header checksum need not sit where this version's does.
func TestReadFromRefusesALaterVersionWhateverItsHeaderLooksLike(t *testing.T) {
	for _, cfg := range snapConfigs(nil) {
		snap := validSnapshot(t, cfg)
		later := bytes.Clone(snap)
		binary.LittleEndian.PutUint32(later[8:], SnapshotVersion+1)
		later[100] ^= 0xff // a field this version does not know; its checksum is elsewhere
		l := newLimiter(t, cfg)
		if _, err := l.ReadFrom(bytes.NewReader(later)); !errors.Is(err, ErrSnapshotVersion) {
			t.Errorf("%v: ReadFrom of a later version = %v, want ErrSnapshotVersion", cfg.Algorithm, err)
		}
		checkEmptyAndUsable(t, l, cfg.Algorithm.String())
	}
}
