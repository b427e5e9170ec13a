# Benchmark harness: the engine suite (./bench), ours vs peers
# (./bench/peers, its own module), benchstat against a committed baseline,
# profiles, and the generated RESULTS.md. Outputs go to out/bench/.
#
#   make bench       engine suite, -count=$(BENCH_COUNT), out/bench/engine.txt
#   make benchstat   make bench, then benchstat vs $(BENCH_BASELINE) (created if missing)
#   make compare     ours vs peers in interleaved rounds, out/bench/peers.txt, ratio table
#   make profile     out/cpu.pprof, out/mem.pprof of a representative scenario
#   make trace       out/trace.out of the same scenario
#   make bench-gateway  bin/gateway vs nginx (limit_req) in front of one
#                    upstream, wrk at 1 and 32 connections in interleaved
#                    rounds, out/bench/gateway.txt (bench/gateway-vs-nginx.sh)
#   make results     all of the above at RESULTS_* settings, then RESULTS.md
BENCH_DIR      ?= out/bench
BENCH_BASELINE ?= bench/baseline.txt
BENCH_COUNT    ?= 10
BENCH_TIME     ?= 1s
BENCH_CPU      ?= 1,2
COMPARE_COUNT  ?= 6
COMPARE_TIME   ?= 0.5s
RESULTS_COUNT  ?= 6
RESULTS_TIME   ?= 0.5s
BIG_COUNT      ?= 3
RESULTS_LABEL  ?=
# Targets that write out/results-fragments/*.md before RESULTS.md is made
# (other components append here; run from the recipe, so order of
# inclusion of mk/*.mk does not matter).
RESULTS_DEPS   +=
GATEWAY_ROUNDS   ?= 5
GATEWAY_DURATION ?= 5s
GATEWAY_CONNS    ?= 1 32
PROFILE_BENCH  ?= ^BenchmarkAllow$$/^counter$$/^keys=100k$$/^zipf$$

# Single-goroutine benchmarks run at the default GOMAXPROCS; only the
# RunParallel ones vary cores (-cpu), which would otherwise double the time.
# The engine suite with the memory floor (hash, probe, one CAS in a flat
# heap table of the same keys) in the same rounds, so that RESULTS.md's
# distance-to-floor ratios compare scenarios measured side by side.
BENCH_SERIAL   := ^Benchmark(Allow|AllowN|AllowMany|Peek|NewKeys|Floor)$$/^(counter|log|gcra|heap)$$
BENCH_PARALLEL := ^BenchmarkAllowParallel$$
PEERS_SERIAL   := ^Benchmark(Allow|AllowLimit|AllowN|Peek|NewKeys|Middleware)$$

# $(call bench-run,DIR,REGEX,FLAGS,OUT): run one benchmark invocation in DIR,
# append its output to OUT and the exact command to commands.txt, and fail
# when go test fails (the pipe through tee would hide it otherwise).
define bench-run
	@mkdir -p $(BENCH_DIR)
	@echo "(cd $(1) && go test -run '^$$' -bench '$(2)' $(3) .) >> $(4)" | tee -a $(BENCH_DIR)/commands.txt
	@{ cd $(1) && $(GO) test -run '^$$' -bench '$(2)' $(3) . ; echo $$? > $(abspath $(BENCH_DIR))/.rc; } 2>&1 | tee -a $(abspath $(4)); exit $$(cat $(BENCH_DIR)/.rc)
endef

# $(call bench-rounds,DIR,REGEX,FLAGS,ROUNDS,OUT): as bench-run, but ROUNDS
# runs of the test binary with -count=1 instead of one with -count=ROUNDS.
# go test's -count repeats each sub-benchmark back to back (ours six times,
# then a peer six times); rounds measure every implementation of a scenario
# in turn, ROUNDS times over, so a noisy minute hits them alike and the
# ratios of RESULTS.md compare implementations measured side by side.
define bench-rounds
	@mkdir -p $(BENCH_DIR)
	@echo "for i in \$$(seq $(4)); do (cd $(1) && go test -run '^$$' -bench '$(2)' -count=1 $(3) .); done >> $(5)" | tee -a $(BENCH_DIR)/commands.txt
	@cd $(1) && $(GO) test -c -o $(abspath $(BENCH_DIR))/rounds.test .
	@for i in $$(seq $(4)); do \
		{ (cd $(1) && $(abspath $(BENCH_DIR))/rounds.test -test.run '^$$' -test.bench '$(2)' -test.count=1 $(addprefix -test.,$(patsubst -%,%,$(3)))) ; echo $$? > $(abspath $(BENCH_DIR))/.rc; } 2>&1 | tee -a $(abspath $(5)); \
		rc=$$(cat $(BENCH_DIR)/.rc); [ "$$rc" = 0 ] || exit $$rc; \
	done
endef

.PHONY: bench benchstat bench-baseline compare profile trace results bench-big bench-smoke bench-gateway

## bench: the engine suite and the floor in $(BENCH_COUNT) rounds, to out/bench/engine.txt.
bench:
	@mkdir -p $(BENCH_DIR) && rm -f $(BENCH_DIR)/engine.txt
	$(call bench-rounds,bench,$(BENCH_SERIAL),-benchtime=$(BENCH_TIME),$(BENCH_COUNT),$(BENCH_DIR)/engine.txt)
	$(call bench-rounds,bench,$(BENCH_PARALLEL),-cpu=$(BENCH_CPU) -benchtime=$(BENCH_TIME),$(BENCH_COUNT),$(BENCH_DIR)/engine.txt)

## benchstat: run the engine suite and compare it with the committed baseline.
benchstat: bench
	@if [ ! -f $(BENCH_BASELINE) ]; then \
		cp $(BENCH_DIR)/engine.txt $(BENCH_BASELINE); \
		echo "no baseline: created $(BENCH_BASELINE) from this run; commit it"; \
	fi
	$(GO) tool -modfile=cmd/resultsmd/go.mod benchstat $(BENCH_BASELINE) $(BENCH_DIR)/engine.txt

## bench-baseline: make the last engine run the committed baseline.
bench-baseline:
	cp $(BENCH_DIR)/engine.txt $(BENCH_BASELINE)

## bench-big: the 10M-key engine scenarios (about 2 GB) and the snapshot write and restore of 10M counter keys, to out/bench/big.txt.
bench-big:
	@mkdir -p $(BENCH_DIR) && rm -f $(BENCH_DIR)/big.txt
	$(call bench-run,bench,^BenchmarkAllow$$/./^keys=10M$$,-count=$(BIG_COUNT) -benchtime=$(RESULTS_TIME) -bench.big,$(BENCH_DIR)/big.txt)
	$(call bench-run,bench,^BenchmarkSnapshot$$/./^keys=10M$$,-count=$(BIG_COUNT) -benchtime=3x -bench.big,$(BENCH_DIR)/big.txt)

## compare: ours and the peers in rounds (each round measures every implementation of a scenario in turn), then the ratio table.
compare:
	@mkdir -p $(BENCH_DIR) && rm -f $(BENCH_DIR)/peers.txt
	$(call bench-rounds,bench/peers,$(PEERS_SERIAL),-benchtime=$(COMPARE_TIME),$(COMPARE_COUNT),$(BENCH_DIR)/peers.txt)
	$(call bench-rounds,bench/peers,$(BENCH_PARALLEL),-cpu=$(BENCH_CPU) -benchtime=$(COMPARE_TIME),$(COMPARE_COUNT),$(BENCH_DIR)/peers.txt)
	$(GO) run -C cmd/resultsmd . -ratio $(abspath $(BENCH_DIR))/peers.txt

## bench-gateway: bin/gateway against nginx with limit_req in front of the same upstream (wrk; nginx and wrk installed from Debian when absent and root, a loud skip otherwise), to out/bench/gateway.txt.
bench-gateway: gateway
	@mkdir -p $(BENCH_DIR)
	@echo "ROUNDS=$(GATEWAY_ROUNDS) DURATION=$(GATEWAY_DURATION) CONNS=\"$(GATEWAY_CONNS)\" bench/gateway-vs-nginx.sh $(BENCH_DIR)/gateway.txt" | tee -a $(BENCH_DIR)/commands.txt
	ROUNDS=$(GATEWAY_ROUNDS) DURATION=$(GATEWAY_DURATION) CONNS="$(GATEWAY_CONNS)" GATEWAY_BIN=$(GATEWAY_BIN) \
		bash bench/gateway-vs-nginx.sh $(BENCH_DIR)/gateway.txt

RESULTS_DEPS += bench-gateway

## profile: CPU and heap profiles of one representative scenario.
profile:
	@mkdir -p out
	$(GO) test -run '^$$' -bench '$(PROFILE_BENCH)' -benchtime=3s -outputdir $(CURDIR)/out \
		-cpuprofile cpu.pprof -memprofile mem.pprof -o $(CURDIR)/out/bench.test ./bench/
	@echo "go tool pprof -http=127.0.0.1:8080 out/cpu.pprof   # or out/mem.pprof"

## trace: an execution trace of the same scenario.
trace:
	@mkdir -p out
	$(GO) test -run '^$$' -bench '$(PROFILE_BENCH)' -benchtime=300ms -outputdir $(CURDIR)/out \
		-trace trace.out ./bench/
	@echo "go tool trace out/trace.out"

## results: measure everything at RESULTS_COUNT and generate RESULTS.md.
results:
	@rm -f $(BENCH_DIR)/commands.txt
	$(MAKE) bench BENCH_COUNT=$(RESULTS_COUNT) BENCH_TIME=$(RESULTS_TIME)
	$(MAKE) bench-big
	$(MAKE) compare COMPARE_COUNT=$(RESULTS_COUNT) COMPARE_TIME=$(RESULTS_TIME)
	$(if $(strip $(RESULTS_DEPS)),$(MAKE) $(RESULTS_DEPS))
	$(GO) run -C cmd/resultsmd . -in $(abspath $(BENCH_DIR)) -fragments $(CURDIR)/out/results-fragments \
		-peers-module $(CURDIR)/bench/peers -o $(CURDIR)/RESULTS.md -label "$(RESULTS_LABEL)"
	@echo "wrote RESULTS.md"

## bench-smoke (make test): every benchmark once, never judging a time,
## plus vet and tests of the nested modules (bench/peers, cmd/resultsmd),
## which ./... skips. Benchmark rows go to $(TEST_OUT)/*.jsonl, not the screen.
##
## The nested modules are tools, not the library: their go lines follow
## their dependencies (the peers' current releases, x/perf), newer than the
## library's Go 1.24 floor. With a Go that cannot build them and may not
## fetch a newer toolchain (GOTOOLCHAIN=local, the default of Debian's and
## the official tarball's go.env), their steps are skipped and the summary
## says so, with the go command's reason.
ABOUT_bench-once := every benchmark of ./bench once, no time judged (~10 s)
ABOUT_peers-race := the peer-comparison module's tests under -race (warm ~5 s, cold ~1 min)
ABOUT_peers-bench-once := every peer benchmark once, no time judged (~20 s)
ABOUT_resultsmd := the RESULTS.md generator's tests (a few seconds)

bench-smoke: testsummary
	$(call gotest,bench-once,$(CURDIR),-short -run '^$$' -bench . -benchtime=1x ./bench/...)
	@for m in bench/peers cmd/resultsmd; do 		if ! err=$$(cd $$m && $(GO) list -m 2>&1 >/dev/null); then 			echo "*** $$m cannot be built with $$($(GO) env GOVERSION) (GOTOOLCHAIN=$$($(GO) env GOTOOLCHAIN)): its steps are SKIPPED"; 			echo "$$m (peer comparison and report tools, not the library): skipped, $$(echo $$err | head -c 200); run with Go 1.26 or GOTOOLCHAIN=auto" >> $(TEST_NOTES); 			continue; 		fi; 		$(MAKE) --no-print-directory bench-smoke-$$(basename $$m) || exit 1; 	done

.PHONY: bench-smoke-peers bench-smoke-resultsmd
bench-smoke-peers: testsummary
	@echo "== peers-vet: go vet in bench/peers (its own module; warm: seconds, cold ~1.5 min)"
	@$(call ticking,running go vet in bench/peers,$(GO) -C bench/peers vet ./...)
	$(call gotest,peers-race,$(CURDIR)/bench/peers,-race -count=1 ./...)
	$(call gotest,peers-bench-once,$(CURDIR)/bench/peers,-short -run '^$$' -bench . -benchtime=1x ./...)

bench-smoke-resultsmd: testsummary
	@echo "== resultsmd-vet: go vet in cmd/resultsmd (its own module; a few seconds)"
	@$(call ticking,running go vet in cmd/resultsmd,$(GO) -C cmd/resultsmd vet ./...)
	$(call gotest,resultsmd,$(CURDIR)/cmd/resultsmd,-count=1 ./...)

TEST_EXTRA += bench-smoke
