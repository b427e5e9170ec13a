# Load generator targets (issue 4). The command is built into bin/ and run
# directly, so its exit status (0 pass, 1 objective missed, 2 bad flags)
# reaches make unchanged (`go run` folds every failure into 1).
LOADGEN_BIN   := bin/loadgen
LOADGEN_FLAGS ?=

.PHONY: run soak loadgen-results $(LOADGEN_BIN)

$(LOADGEN_BIN):
	$(GO) build -o $@ ./cmd/loadgen

## run: the main job: ~30 s load test of the default scenario, verdict, out/loadgen/report.{html,json}.
## The first line comes before the build, so the first seconds are not silent.
run:
	@echo "make run: building bin/loadgen, then a ~32 s load test (12 s warm-up, 20 s measured) with a latency/GC verdict"
	@$(GO) build -o $(LOADGEN_BIN) ./cmd/loadgen
	$(LOADGEN_BIN) -out out/loadgen $(LOADGEN_FLAGS)

## soak: 15 minutes of steady state, the real heap-growth check (not in CI).
soak: $(LOADGEN_BIN)
	$(LOADGEN_BIN) -warmup 30s -duration 15m -interval 10s -out out/loadgen-soak $(LOADGEN_FLAGS)

## loadgen-results: run the default scenario and write out/results-fragments/loadgen.md
## (a missed objective is recorded in the fragment, not a make failure).
loadgen-results: $(LOADGEN_BIN)
	$(LOADGEN_BIN) -q -out out/loadgen -md out/results-fragments/loadgen.md \
		-note "engine: $$(git log -1 --format='%h %s' -- engine | cut -c1-72)" $(LOADGEN_FLAGS); \
	rc=$$?; if [ $$rc -gt 1 ]; then exit $$rc; fi

# make results includes the load test figures (out/results-fragments/loadgen.md).
RESULTS_DEPS += loadgen-results
