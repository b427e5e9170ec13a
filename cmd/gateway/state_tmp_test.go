package main

import (
	"os"
	"path/filepath"
	"testing"
)

// TestStateWriteNeverFollowsALinkAtItsTemporaryName: the state is written
// to state_file + ".tmp" first. Whoever can write to the directory may
// have left a symbolic link there (or a file of their own): the write
// must not open the link's target, which it would truncate, fill with the
// snapshot (its secret included) and chmod. It replaces the name with a
// file of its own.
func TestStateWriteNeverFollowsALinkAtItsTemporaryName(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "state")
	victim := filepath.Join(dir, "precious")
	if err := os.WriteFile(victim, []byte("not a snapshot"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(victim, file+".tmp"); err != nil {
		t.Fatal(err)
	}
	g, k, _ := stateGateway(t, stateYAML(file, "  state_interval_ms: -1\n"))
	spend(t, g, "/x", 4)
	if _, err := k.write(); err != nil {
		t.Fatalf("write: %v", err)
	}
	if b, err := os.ReadFile(victim); err != nil || string(b) != "not a snapshot" {
		t.Errorf("the link's target now holds %.20q... (%v): the write followed the link", b, err)
	}
	if fi, err := os.Stat(victim); err != nil || fi.Mode().Perm() != 0o644 {
		t.Errorf("the link's target's mode changed: %v %v", fi.Mode(), err)
	}
	fi, err := os.Lstat(file)
	if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o600 {
		t.Fatalf("state file: %v %v, want a regular file of mode 0600", fi.Mode(), err)
	}
	if _, err := os.Lstat(file + ".tmp"); !os.IsNotExist(err) {
		t.Errorf("the temporary name is left behind: %v", err)
	}
	g2, _, _ := stateGateway(t, stateYAML(file, "  state_interval_ms: -1\n"))
	if got := admittedVia(g2, "/x", 5); got != 1 {
		t.Errorf("after the restart: %d admitted, want 1 (4 of 5 were used)", got)
	}
}
