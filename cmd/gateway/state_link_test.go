package main

import (
	"os"
	"path/filepath"
	"testing"
)

// TestStateFileThatIsALinkIsKeptAtItsTarget: a state_file that is a
// symbolic link (into a persistent volume, say) is read and written where
// it points. Renaming the new snapshot over the link itself would replace
// the link with a file in the link's directory: the volume's copy would
// never change again, and a restart restores that stale one. The target
// need not exist yet (a first start).
func TestStateFileThatIsALinkIsKeptAtItsTarget(t *testing.T) {
	volume, conf := t.TempDir(), t.TempDir()
	target := filepath.Join(volume, "state")
	link := filepath.Join(conf, "state")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	cfg := stateYAML(link, "  state_interval_ms: -1\n")
	g, k, _ := stateGateway(t, cfg)
	spend(t, g, "/x", 3)
	k.final()
	if fi, err := os.Lstat(link); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Fatalf("state_file is no longer a link: %v %v", fi.Mode(), err)
	}
	fi, err := os.Lstat(target)
	if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the link's target: %v %v, want the snapshot, a regular file of mode 0600", fi, err)
	}
	g2, k2, _ := stateGateway(t, cfg)
	spend(t, g2, "/x", 1)
	k2.final() // a second write, over the first, through the link
	g3, _, _ := stateGateway(t, cfg)
	if got := admittedVia(g3, "/x", 5); got != 1 {
		t.Errorf("after two restarts through the link: %d admitted, want 1 (3, then 1 more of 5 were used)", got)
	}
	if fi, err := os.Lstat(link); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Errorf("state_file is no longer a link after the second write: %v %v", fi.Mode(), err)
	}
}
