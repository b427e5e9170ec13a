# Load generator targets. The command is built into bin/ and run directly
# (`go run` folds every failure into 1). Its exit status: 0 PASS, 1 FAIL
# (the limiter missed an objective), 2 bad flags, 3 could not run or write
# its report, 4 INCONCLUSIVE (only machine-dependent figures missed while
# the process was starved of CPU), 130 interrupted. make itself exits 2 for
# any failed recipe, so `make run` prints loadgen's status and what it
# means as its last line; bin/loadgen returns it unchanged.
LOADGEN_BIN   := bin/loadgen
LOADGEN_FLAGS ?=

.PHONY: run soak loadgen-results $(LOADGEN_BIN)

$(LOADGEN_BIN):
	$(GO) build -o $@ ./cmd/loadgen

## run: the main job: ~32 s load test of the default scenario, verdict, out/loadgen/report.{html,json}.
## The first line comes before the build, and the build prints a line every
## TICK_S seconds, so a cold build is not silent.
run:
	@echo "make run: building bin/loadgen (warm Go build cache: seconds; cold: about 2.5 min on 2 cores, a line every 10 s), then a ~32 s load test (12 s warm-up, 20 s measured, a line per second); the verdict comes first, then the figures"
	@$(call ticking,building bin/loadgen,$(GO) build -o $(LOADGEN_BIN) ./cmd/loadgen)
	@echo "make run: $(LOADGEN_BIN) -out out/loadgen $(LOADGEN_FLAGS)"
	@$(LOADGEN_BIN) -out out/loadgen $(LOADGEN_FLAGS); rc=$$?; \
	case $$rc in \
	0) echo "make run: PASS; report: out/loadgen/report.html";; \
	1) echo "make run: FAIL (loadgen exit status 1: the limiter missed an objective; the verdict above says which)";; \
	4) echo "make run: INCONCLUSIVE (loadgen exit status 4: this machine was too busy to measure latency; the limiter's own figures held; the verdict above says why)";; \
	*) echo "make run: loadgen exit status $$rc (2 bad flags, 3 could not run or write its report, 130 interrupted)";; \
	esac; exit $$rc

## soak: 15 minutes of steady state, the real heap-growth check (not in CI).
soak: $(LOADGEN_BIN)
	$(LOADGEN_BIN) -warmup 30s -duration 15m -interval 10s -out out/loadgen-soak $(LOADGEN_FLAGS)

## loadgen-results: run the default scenario and write out/results-fragments/loadgen.md
## (a FAIL or INCONCLUSIVE verdict is recorded in the fragment, not a make failure).
loadgen-results: $(LOADGEN_BIN)
	$(LOADGEN_BIN) -q -out out/loadgen -md out/results-fragments/loadgen.md \
		-note "engine: $$(git log -1 --format='%h %s' -- engine | cut -c1-72)" $(LOADGEN_FLAGS); \
	rc=$$?; case $$rc in 0|1|4) ;; *) exit $$rc;; esac

# make results includes the load test figures (out/results-fragments/loadgen.md).
RESULTS_DEPS += loadgen-results
