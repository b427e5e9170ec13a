# Redis/Valkey backend. The redisstore tests and the Redis
# benchmarks start their own redis-server on 127.0.0.1 (internal/redistest),
# so `make test` must have the binary: redis-server-dep installs Debian's
# package when it is missing (CI runs as root on a fresh machine). The
# clock-skew tests also need a C compiler (redis-skew-dep).
#
#   make bench-redis   decisions/s and P99 against a local redis-server:
#                      ours (log, counter, gcra) vs redis_rate/v10 (GCRA) vs a MULTI ZSET log, plus the
#                      hybrid mode; out/bench/redis.txt and the RESULTS.md
#                      fragment out/results-fragments/redis.md
REDIS_BENCH_TIME  ?= 1s
REDIS_BENCH_COUNT ?= 10
REDIS_BENCH_CPU   ?= 1,2

.PHONY: redis-server-dep redis-skew-dep bench-redis

## redis-server-dep: install redis-server (Debian package) if it is not on PATH.
redis-server-dep:
	@if command -v redis-server >/dev/null 2>&1; then exit 0; fi; \
	if [ "$$(id -u)" -ne 0 ]; then \
		echo "*** redis-server is missing and installing it needs root: the Redis tests will be SKIPPED."; \
		echo "*** To run them: sudo apt-get update && sudo apt-get install -y redis-server"; \
		mkdir -p $(TEST_OUT); echo "redis-server not installed and not root: every test that needs a Redis server is skipped (see the skip list above); install Debian's redis-server to run them" >> $(TEST_NOTES); \
		exit 0; \
	fi; \
	echo "installing redis-server (Debian package) for the redisstore tests"; \
	DEBIAN_FRONTEND=noninteractive apt-get update && \
	DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends redis-server && \
	command -v redis-server

## redis-skew-dep: the clock-skew tests build an LD_PRELOAD library for
## redis-server with the system C compiler; install gcc if cc is missing.
redis-skew-dep:
	@if command -v cc >/dev/null 2>&1; then exit 0; fi; \
	if [ "$$(id -u)" -ne 0 ]; then \
		echo "*** cc is missing and installing it needs root: the Redis clock-skew tests will be SKIPPED."; \
		echo "*** To run them: sudo apt-get update && sudo apt-get install -y gcc libc6-dev"; \
		mkdir -p $(TEST_OUT); echo "no C compiler (cc) and not root: the redisstore clock-skew tests (servers ahead, behind, stepping back) are skipped; install gcc to run them" >> $(TEST_NOTES); \
		exit 0; \
	fi; \
	echo "installing gcc (Debian package) for the redisstore clock-skew tests"; \
	DEBIAN_FRONTEND=noninteractive apt-get update && \
	DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends gcc libc6-dev && \
	command -v cc

TEST_DEPS += redis-server-dep redis-skew-dep

## bench-redis: the Redis benchmarks, then the markdown fragment for RESULTS.md.
bench-redis: redis-server-dep
	@mkdir -p out/bench out/results-fragments
	@# Rounds, not -count: -count repeats each sub-benchmark back to back
	@# (see bench/peers/redisbench's doc); one binary run per round
	@# interleaves the implementations and rotates which goes first.
	cd bench/peers && $(GO) test -c -o $(CURDIR)/out/bench/redisbench.test ./redisbench/
	rm -f out/bench/redis.txt; \
	for i in $$(seq 0 $$(($(REDIS_BENCH_COUNT) - 1))); do \
		(cd bench/peers/redisbench && $(CURDIR)/out/bench/redisbench.test -test.run '^$$' -test.bench . -test.count=1 \
			-test.benchtime=$(REDIS_BENCH_TIME) -test.cpu=$(REDIS_BENCH_CPU) -test.benchmem -redisbench.round=$$i) \
			>> out/bench/redis.txt || exit 1; \
	done
	cd bench/peers && $(GO) run ./redisbench/cmd/redismd \
		-in $(CURDIR)/out/bench/redis.txt -o $(CURDIR)/out/results-fragments/redis.md \
		-cmd "make bench-redis REDIS_BENCH_TIME=$(REDIS_BENCH_TIME) REDIS_BENCH_COUNT=$(REDIS_BENCH_COUNT) REDIS_BENCH_CPU=$(REDIS_BENCH_CPU)"
	@echo "wrote out/results-fragments/redis.md"

RESULTS_DEPS += bench-redis
