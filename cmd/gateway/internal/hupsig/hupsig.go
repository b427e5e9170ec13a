// Package hupsig catches SIGHUP as early as a Go program can: from its own
// package initialization, before main and before the initializers of the
// gateway's heavier dependencies (Prometheus, protobuf, go-redis, yaml) run.
//
// A Go program that has not called signal.Notify for SIGHUP exits with
// status 129 when one arrives. The gateway reloads on SIGHUP, so an
// operator's (or a config manager's) reload that lands while the process is
// starting must not kill it. Packages are initialized in dependency order,
// and among the packages ready at each step by import path; this package
// imports only os/signal and syscall, so it is initialized right after
// them, while the gateway's dependencies that sort after
// github.com/slidelimit are not (see cmd/gateway's TestW7 for the measured
// window). What remains before it: exec, the runtime's start-up and the
// standard packages os/signal needs. A SIGHUP in that window still ends
// the process, as it ends any Go program.
package hupsig

import (
	"os"
	"os/signal"
	"syscall"
)

// C receives SIGHUP from this package's initialization on. It holds one
// signal: a reload asked for during start-up is done once serving begins,
// and several asked for at once are one reload.
var C = notify()

func notify() chan os.Signal {
	c := make(chan os.Signal, 1)
	signal.Notify(c, syscall.SIGHUP)
	return c
}
