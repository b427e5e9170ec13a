package main

import (
	"path/filepath"
	"time"
)

// stateConfig is rate_limiting.state_file and state_interval_ms: where
// the in-memory rules' state is kept across restarts, and how often it is
// written while serving. Read at start only.
type stateConfig struct {
	file     string        // "": no state kept
	interval time.Duration // between periodic writes; 0: none (at shutdown only)
}

// State interval bounds. A write takes about a second per 10 million
// keys; more often than minStateInterval would buy little at that cost.
const (
	defaultStateInterval = 10 * time.Second
	minStateInterval     = 100 * time.Millisecond
)

func (rl *rateLimiting) stateConfig() (stateConfig, error) {
	const p = "rate_limiting"
	if rl.StateFile == "" {
		if rl.StateIntervalMs != 0 {
			return stateConfig{}, fieldErr(p+".state_interval_ms", "is set but %s.state_file is not", p)
		}
		return stateConfig{}, nil
	}
	c := stateConfig{file: filepath.Clean(rl.StateFile)}
	if base := filepath.Base(c.file); base == "." || base == ".." || base == string(filepath.Separator) || rl.StateFile[len(rl.StateFile)-1] == filepath.Separator {
		return stateConfig{}, fieldErr(p+".state_file", "%q names a directory; give a file name", rl.StateFile)
	}
	switch v := rl.StateIntervalMs; {
	case v == 0:
		c.interval = defaultStateInterval
	case v == -1:
		c.interval = 0
	case v < minStateInterval.Milliseconds() || v > maxMs:
		return stateConfig{}, fieldErr(p+".state_interval_ms", "must be in [%d, %d], or -1 for no periodic write (0: the default %v), got %d",
			minStateInterval.Milliseconds(), maxMs, defaultStateInterval, v)
	default:
		c.interval = time.Duration(v) * time.Millisecond
	}
	return c, nil
}
