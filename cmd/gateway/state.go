package main

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/slidelimit/slidelimit/httplimit"
)

// stateConfig is rate_limiting.state_file and state_interval_ms: where
// the in-memory rules' state is kept across restarts, and how often it is
// written while serving. Read at start only.
type stateConfig struct {
	file     string        // "": no state kept
	interval time.Duration // between periodic writes; 0: none (at shutdown only)
}

// State interval bounds. Encoding 10 million sliding-counter keys took
// 72 ms (about 160 MB; BenchmarkSnapshot/write/keys=10M, to io.Discard, in
// RESULTS.md); the file's write and sync add the disk's time for those
// bytes. More often than minStateInterval would buy little at that cost.
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

// stateKeeper keeps the in-memory rules' state in cfg.file: it restores
// it at start (startState), writes it every cfg.interval while serving
// and once more at shutdown (final), after the server stopped taking
// requests and those in flight finished, so the last snapshot is exact.
// Rules on Redis (backend redis or hybrid) keep their counts in Redis and
// are not in it.
//
// Each write goes to cfg.file + ".tmp" (mode 0600: the snapshot holds the
// limiters' key-hash secrets), is synced, renamed over cfg.file and the
// directory synced (a cfg.file that is a symbolic link: all of that where
// it points, and the link stays): cfg.file is always one whole snapshot, the last whose
// write completed. A killed process (SIGKILL, a crash) loses the
// decisions made after that snapshot was taken (when its write began):
// at most one interval's plus one write's duration, while a write takes
// less than the interval.
//
// A snapshot damaged part way (it cannot be, written this way, but disks
// and operators can) restores the rules before the damage, each verified
// whole by its own checksums, and the rest start empty: keeping a verified
// count never admits more than the limit would have, starting it empty
// can.
//
// A snapshot that cannot be restored whole (damaged, of another format,
// or with rules that are gone or changed) is renamed aside to
// cfg.file + ".rejected-<UTC time>" and kept, never deleted: the next
// write starts a new cfg.file, and the old one stays for the operator.
// If it cannot be renamed aside, nothing is written until restart, so a
// snapshot that may be good is never overwritten by an emptier one.
type stateKeeper struct {
	cfg stateConfig
	// path is cfg.file, or where it points if it is a symbolic link: the
	// snapshot is read, set aside and written there (renaming the new one
	// over the link would replace the link with a file beside it, and the
	// target, on a persistent volume say, would never change again).
	path string
	g    *gateway
	log  *slog.Logger

	mu     sync.Mutex // serializes writes
	frozen bool       // under mu: cfg.file could not be set aside; write nothing
	stop   chan struct{}
	done   chan struct{}
	once   sync.Once
	errLog logThrottle // periodic write failures: one line per errLogInterval

	lastTime, lastBytes, lastDuration prometheus.Gauge
	writes                            *prometheus.CounterVec
	restore                           *prometheus.GaugeVec
}

// Restore outcomes, the values of the restore metric's outcome label.
const (
	restoreRestored = "restored" // every rule of the snapshot was restored
	restorePartial  = "partial"  // the file was whole, but some of its rules were gone or changed (they start empty)
	restoreFailed   = "failed"   // unreadable, damaged or of another format: what came before the damage was restored
	restoreAbsent   = "absent"   // no file: a first start
)

// startState restores the state in c.file into g's current generation
// (which must not have served yet) and starts the periodic writes. With
// no state_file it returns nil, on which every method does nothing. The
// error is for a state_file that can never be written (its directory is
// missing, or it is a directory); a snapshot that does not restore is
// logged, set aside, and the rules it could not restore start empty.
func startState(c stateConfig, g *gateway, log *slog.Logger) (*stateKeeper, error) {
	if c.file == "" {
		return nil, nil
	}
	const field = "rate_limiting.state_file"
	path, err := followLinks(c.file)
	if err != nil {
		return nil, fmt.Errorf("%s: %w: %w", field, err, errConfig)
	}
	dir := filepath.Dir(path)
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		if err == nil {
			err = errors.New("not a directory")
		}
		return nil, fmt.Errorf("%s: the directory %s: %w: %w", field, dir, err, errConfig)
	}
	if fi, err := os.Stat(path); err == nil && !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: %s is not a regular file: %w", field, path, errConfig)
	}
	if path != c.file {
		log.Info("rate_limiting.state_file is a symbolic link; the state is kept where it points", "state_file", c.file, "target", path)
	}
	k := &stateKeeper{cfg: c, path: path, g: g, log: log, stop: make(chan struct{}), done: make(chan struct{})}
	k.register(g.metrics.reg)
	outcome := k.restoreFile()
	for _, o := range []string{restoreRestored, restorePartial, restoreFailed, restoreAbsent} {
		v := 0.0
		if o == outcome {
			v = 1
		}
		k.restore.WithLabelValues(o).Set(v)
	}
	if c.interval > 0 {
		go k.loop()
	} else {
		close(k.done)
	}
	return k, nil
}

func (k *stateKeeper) register(reg *prometheus.Registry) {
	k.lastTime = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "slidelimit_gateway_state_last_write_timestamp_seconds",
		Help: "When the last state snapshot (rate_limiting.state_file) written whole was taken (its write began: every decision before then is in it), in Unix seconds; 0 before the first.",
	})
	k.lastBytes = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "slidelimit_gateway_state_last_write_bytes",
		Help: "Size of the last state snapshot written.",
	})
	k.lastDuration = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "slidelimit_gateway_state_last_write_duration_seconds",
		Help: "How long the last state snapshot took to write, sync and rename into place.",
	})
	k.writes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "slidelimit_gateway_state_writes_total",
		Help: "State snapshot writes by result: ok, or error (the previous snapshot stays in place; the log says why).",
	}, []string{"result"})
	k.restore = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "slidelimit_gateway_state_restore",
		Help: "1 for the outcome of restoring the state snapshot at start, 0 for the others: restored (every rule), partial (rules gone or changed start empty), failed (unreadable or damaged: set aside, rules after the damage start empty), absent (no snapshot).",
	}, []string{"outcome"})
	for _, r := range []string{"ok", "error"} {
		k.writes.WithLabelValues(r)
	}
	reg.MustRegister(k.lastTime, k.lastBytes, k.lastDuration, k.writes, k.restore)
}

// restoreFile restores cfg.file into the current generation and returns
// the outcome; one that is not restoreRestored or restoreAbsent sets the
// file aside.
func (k *stateKeeper) restoreFile() string {
	f, err := os.Open(k.path)
	if errors.Is(err, fs.ErrNotExist) {
		k.log.Info("no state snapshot yet; the in-memory rules start empty", "state_file", k.cfg.file)
		return restoreAbsent
	}
	if err != nil {
		k.log.Error("state snapshot unreadable; the in-memory rules start empty", "state_file", k.cfg.file, "err", err.Error())
		k.setAside()
		return restoreFailed
	}
	defer f.Close()
	var written time.Time
	if fi, err := f.Stat(); err == nil {
		written = fi.ModTime()
	}
	gen := k.g.cur.Load()
	start := time.Now()
	n, err := gen.mw.ReadFrom(bufio.NewReaderSize(f, 256<<10))
	attrs := []any{"state_file", k.cfg.file, "bytes", n, "written", written.UTC().Format(time.RFC3339Nano),
		"age", time.Since(written).Round(time.Millisecond).String(), "took", time.Since(start).Round(time.Millisecond).String()}
	if err == nil {
		k.log.Info("state restored", attrs...)
		return restoreRestored
	}
	outcome := restorePartial
	if !onlyRulesSkipped(err) {
		outcome = restoreFailed
	}
	k.log.Error("state snapshot not restored whole: rules it names start empty where it says why", append(attrs, "outcome", outcome, "err", err.Error())...)
	k.setAside()
	return outcome
}

// onlyRulesSkipped reports whether every error joined in err is a rule
// the snapshot had that this configuration could not take.
func onlyRulesSkipped(err error) bool {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range j.Unwrap() {
			if !errors.Is(e, httplimit.ErrRuleNotRestored) {
				return false
			}
		}
		return true
	}
	return errors.Is(err, httplimit.ErrRuleNotRestored)
}

// setAside renames cfg.file to a name of its own beside it, never over
// another file; on failure writes stop (frozen) so it is not overwritten.
func (k *stateKeeper) setAside() {
	base := k.path + ".rejected-" + time.Now().UTC().Format("20060102T150405.000Z")
	aside := base
	for i := 1; ; i++ {
		if _, err := os.Lstat(aside); errors.Is(err, fs.ErrNotExist) {
			break
		}
		aside = fmt.Sprintf("%s-%d", base, i)
	}
	if err := os.Rename(k.path, aside); err != nil {
		k.frozen = true
		k.log.Error("could not set the state snapshot aside; no state is written until restart, so it is not overwritten",
			"state_file", k.cfg.file, "err", err.Error())
		return
	}
	_ = syncDir(filepath.Dir(k.path))
	k.log.Warn("state snapshot set aside; the next write starts a new one", "state_file", k.cfg.file, "kept_as", aside)
}

// loop writes a snapshot every interval until stop.
func (k *stateKeeper) loop() {
	defer close(k.done)
	t := time.NewTicker(k.cfg.interval)
	defer t.Stop()
	warned := false
	for {
		select {
		case <-k.stop:
			return
		case <-t.C:
		}
		if gen := k.g.cur.Load(); gen != nil && gen.cfg.state != k.cfg && !warned {
			warned = true
			k.log.Warn("rate_limiting.state_file and state_interval_ms change only at restart; the state keeps its file and interval",
				"state_file", k.cfg.file, "state_interval", k.cfg.interval.String())
		}
		if _, err := k.write(); err != nil {
			if n, ok := k.errLog.tick(time.Now()); ok {
				k.log.Error("writing the state snapshot failed; the previous one stays in place", "state_file", k.cfg.file,
					"err", err.Error(), "failures_since_last_line", n)
			}
		}
	}
}

// close stops the periodic writes without writing (a start that failed,
// or after final). Safe on nil and more than once.
func (k *stateKeeper) close() {
	if k == nil {
		return
	}
	k.once.Do(func() { close(k.stop) })
	<-k.done
}

// final stops the periodic writes and writes the last snapshot; call it
// once no request is being decided, before the limiters close.
func (k *stateKeeper) final() {
	if k == nil {
		return
	}
	k.close()
	n, err := k.write()
	if err != nil {
		k.log.Error("writing the state snapshot at shutdown failed; the previous one stays in place", "state_file", k.cfg.file, "err", err.Error())
		return
	}
	k.log.Info("state written", "state_file", k.cfg.file, "bytes", n)
}

// errStateFrozen is write's error while the unrestorable snapshot could
// not be set aside.
var errStateFrozen = errors.New("state writes are off: the snapshot found at start could not be set aside")

// write writes a snapshot of the current generation atomically.
func (k *stateKeeper) write() (int64, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.frozen {
		k.writes.WithLabelValues("error").Inc()
		return 0, errStateFrozen
	}
	start := time.Now()
	n, err := k.writeFile()
	if err != nil {
		k.writes.WithLabelValues("error").Inc()
		return n, err
	}
	d := time.Since(start)
	k.writes.WithLabelValues("ok").Inc()
	// The snapshot's time is when its write began: every decision made
	// before then is in it.
	k.lastTime.Set(float64(start.UnixNano()) / 1e9)
	k.lastBytes.Set(float64(n))
	k.lastDuration.Set(d.Seconds())
	return n, nil
}

func (k *stateKeeper) writeFile() (n int64, err error) {
	gen := k.g.acquire() // holds its limiters open against a reload's retirement
	if gen == nil {
		return 0, errors.New("no configuration is loaded")
	}
	defer gen.refs.Add(-1)
	tmp := k.path + ".tmp"
	// A file or link at the temporary name (a .tmp left by a process
	// killed while writing, so none piles up, or one someone who can
	// write to the directory put there) is removed, and a new file is
	// created (O_EXCL: never through a symbolic link, whose target would
	// be truncated, filled with the snapshot and chmodded); a directory
	// there is an error. 0600 because the snapshot holds the limiters'
	// key-hash secrets (Chmod too: the umask could only have removed
	// bits).
	if fi, err := os.Lstat(tmp); err == nil && !fi.IsDir() {
		if err := os.Remove(tmp); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return 0, fmt.Errorf("removing the earlier %s: %w", tmp, err)
		}
	}
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return 0, fmt.Errorf("creating %s: %w", tmp, err)
	}
	defer func() {
		if err != nil {
			_ = f.Close()
			_ = os.Remove(tmp)
		}
	}()
	if err := f.Chmod(0o600); err != nil {
		return 0, fmt.Errorf("chmod %s: %w", tmp, err)
	}
	// No buffer of our own: the middleware writes in 64 KiB chunks.
	if n, err = gen.mw.WriteTo(f); err != nil {
		return n, err
	}
	if err := f.Sync(); err != nil {
		return n, fmt.Errorf("syncing %s: %w", tmp, err)
	}
	if err := f.Close(); err != nil {
		return n, fmt.Errorf("closing %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, k.path); err != nil {
		return n, fmt.Errorf("renaming %s into place: %w", tmp, err)
	}
	// The rename is durable once the directory is synced.
	if err := syncDir(filepath.Dir(k.path)); err != nil {
		return n, fmt.Errorf("syncing the directory of %s: %w", k.path, err)
	}
	return n, nil
}

// maxLinks bounds the symbolic links followLinks follows (Linux's own
// bound, ELOOP past it).
const maxLinks = 40

// followLinks returns file, or the path its chain of symbolic links ends
// at, which need not exist yet (a state_file whose target a first start
// creates).
func followLinks(file string) (string, error) {
	path := file
	for range maxLinks {
		fi, err := os.Lstat(path)
		if err != nil || fi.Mode()&fs.ModeSymlink == 0 {
			return path, nil // not there yet, or not a link
		}
		to, err := os.Readlink(path)
		if err != nil {
			return "", err
		}
		if !filepath.IsAbs(to) {
			to = filepath.Join(filepath.Dir(path), to)
		}
		path = filepath.Clean(to)
	}
	return "", fmt.Errorf("%s: more than %d symbolic links", file, maxLinks)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
