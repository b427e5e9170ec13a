// Package redistest starts a real redis-server for tests: on 127.0.0.1, on a
// free high port, with persistence off (--save "" --appendonly no), in a
// temporary directory that the test framework removes. Start waits until the
// server answers PING and registers a cleanup that stops it; Kill and Restart
// let fault tests take the server away mid-run and bring it back on the same
// port, empty.
//
// No mocks: where the binary is missing, Start skips the test with a message
// that says how to install it (apt-get install redis-server). CI installs it
// through mk/redis.mk (TEST_DEPS) so there the tests always run.
package redistest
