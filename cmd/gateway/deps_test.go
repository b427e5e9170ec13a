package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestLibrariesDoNotCompilePrometheus: client_golang is the gateway's
// dependency only; a program importing engine or httplimit must not
// compile it.
func TestLibrariesDoNotCompilePrometheus(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go tool is needed: %v", err)
	}
	out, err := exec.Command(goBin, "list", "-deps", "github.com/slidelimit/slidelimit/engine", "github.com/slidelimit/slidelimit/httplimit", "github.com/slidelimit/slidelimit/redisstore").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "github.com/slidelimit/slidelimit/engine") {
		t.Fatalf("go list output lacks engine itself:\n%s", out)
	}
	for _, line := range strings.Split(string(out), "\n") {
		if strings.Contains(line, "prometheus") {
			t.Errorf("a library depends on %s", line)
		}
	}
}
