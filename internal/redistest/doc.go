// Package redistest starts a real redis-server for tests: on 127.0.0.1, on a
// free high port, with persistence off (--save "" --appendonly no), in a
// temporary directory that the test framework removes. Start waits until the
// server answers PING and registers a cleanup that stops it; Kill and Restart
// let fault tests take the server away mid-run and bring it back on the same
// port, empty; Pause and Resume (SIGSTOP, SIGCONT) stall it with whatever
// clients send piling up in its socket. NewProxy puts a loopback proxy with
// a fixed delay each way in front of a server (a distant Redis), Do sends a
// command without a client library, StartCluster starts and joins a Redis
// Cluster of masters (redis-cli --cluster create), and StartSentinel a
// master, a replica and a sentinel watching them; StartWith passes more
// redis-server arguments (maxmemory, a renamed command). StartSkewed,
// StartSkewedCluster and StartSkewedSentinel (its replica) start servers
// whose wall clock is shifted by an
// LD_PRELOAD library that the test builds with the system C compiler (cc),
// and whose Clock moves a live server's clock (clients ahead or behind,
// NTP steps); without cc those tests are skipped, saying so.
//
// No mocks: where a binary (redis-server, redis-cli) is missing, the test is
// skipped with a message that says how to install it (apt-get install
// redis-server, which ships both). CI installs it through mk/redis.mk
// (TEST_DEPS) so there the tests always run.
package redistest
