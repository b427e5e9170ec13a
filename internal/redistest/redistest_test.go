package redistest

import "testing"

func TestStartKillRestart(t *testing.T) {
	s := Start(t)
	if err := ping(s.Addr()); err != nil {
		t.Fatalf("ping after Start: %v", err)
	}
	s.Kill()
	if err := ping(s.Addr()); err == nil {
		t.Fatal("server still answers PING after Kill")
	}
	s.Kill() // idempotent
	s.Restart()
	if err := ping(s.Addr()); err != nil {
		t.Fatalf("ping after Restart: %v", err)
	}
}
