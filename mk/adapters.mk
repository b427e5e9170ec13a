# Adapters, each its own module so that the library's module
# requires none of their dependencies:
#
#   grpclimit            gRPC interceptors (grpc-go, go-grpc-middleware)
#   promlimit            Prometheus collector (client_golang)
#   examples/frameworks  chi, gin and echo examples
#
# `make test` vets each and runs its tests under -race (./... of the root
# module skips nested modules) and once more with the Go 1.24 toolchain,
# runs grpclimit's benchmarks once so they do not rot (no time is judged),
# and checks that engine and httplimit still import only the standard
# library and this module's own packages.
#
#   make bench-grpc   the interceptor against go-grpc-middleware's ratelimit
#                     with x/time/rate, in $(GRPC_BENCH_COUNT) rounds,
#                     out/bench/grpc.txt and benchstat's medians
ADAPTER_MODULES  := grpclimit promlimit examples/frameworks
GRPC_BENCH_COUNT ?= 5
GRPC_BENCH_TIME  ?= 0.3s

TEST_EXTRA += adapters adapters-stdlib-only adapters-go-floor
ABOUT_grpclimit-race := the gRPC interceptors' tests under -race over loopback gRPC (warm ~10 s, cold ~2 min)
ABOUT_grpclimit-bench-once := every gRPC interceptor benchmark once, no time judged (a few seconds)
ABOUT_promlimit-race := the Prometheus collector's tests under -race (warm ~5 s, cold ~1 min)
ABOUT_frameworks-race := the chi, gin and echo examples under -race (warm ~5 s, cold ~1 min)
.PHONY: adapters adapters-stdlib-only adapters-go-floor bench-grpc

## adapters (make test): vet and race tests of every adapter module.
adapters: testsummary
	@# No set -e here: ticking's own wait for its killed ticker returns 143.
	@for m in $(ADAPTER_MODULES); do echo "== go vet ($$m): vets the adapter module (warm ~2 s, cold ~45 s)"; ( $(call ticking,running go vet in $$m,$(GO) -C $$m vet ./...) ) || exit 1; done
	$(call gotest,grpclimit-race,$(CURDIR)/grpclimit,-race -count=1 ./...)
	$(call gotest,grpclimit-bench-once,$(CURDIR)/grpclimit,-run '^$$' -bench . -benchtime=1x ./...)
	$(call gotest,promlimit-race,$(CURDIR)/promlimit,-race -count=1 ./...)
	$(call gotest,frameworks-race,$(CURDIR)/examples/frameworks,-race -count=1 ./...)

## adapters-stdlib-only (make test): engine and httplimit import nothing
## outside the standard library and this module (the adapters' dependencies
## stay in their own modules). go list's .Standard marks the standard
## library, its vendored golang.org/x packages included.
STDLIB_ONLY_PKGS ?= ./engine ./httplimit
adapters-stdlib-only:
	@mod=$$($(GO) list -m); \
	bad=$$($(GO) list -deps -f '{{if not .Standard}}{{.ImportPath}}{{end}}' $(STDLIB_ONLY_PKGS) | grep -v "^$$mod\(/\|$$\)" || true); \
	if [ -n "$$bad" ]; then echo "adapters-stdlib-only: FAIL: $(STDLIB_ONLY_PKGS) import packages outside the standard library and $$mod:"; echo "$$bad"; exit 1; fi; \
	echo "adapters-stdlib-only: $(STDLIB_ONLY_PKGS) import only the standard library and $$mod"

## adapters-go-floor (make test): the adapter modules' tests once (no
## -race) with the oldest supported toolchain ($(GO_FLOOR), mk/compat.mk),
## so that none of their dependencies needs a newer Go than the library.
adapters-go-floor: testsummary
	@if ! GOTOOLCHAIN=$(GO_FLOOR) $(GO) version >/dev/null 2>&1; then \
		echo "*** $(GO_FLOOR) cannot be fetched (no module proxy?): the adapters' Go 1.24 run is SKIPPED"; \
		mkdir -p $(TEST_OUT); echo "$(GO_FLOOR) toolchain could not be fetched: the adapter modules' tests did not run under Go 1.24" >> $(TEST_NOTES); \
		exit 0; \
	fi; set -o pipefail; for m in $(ADAPTER_MODULES); do \
		(cd $$m && GOTOOLCHAIN=$(GO_FLOOR) $(GO) test -json -count=1 ./... 2>&1 | \
			$(TESTSUM) stream -step adapters-$(GO_FLOOR)-$$(basename $$m) -o $(TEST_OUT)/adapters-$(GO_FLOOR)-$$(basename $$m).jsonl) || exit 1; \
	done

## bench-grpc: the gRPC interceptor benchmarks in rounds (one test-binary
## run per round, every implementation in turn, as make compare does), to
## out/bench/grpc.txt.
bench-grpc:
	@mkdir -p out/bench && rm -f out/bench/grpc.txt
	cd grpclimit && $(GO) test -c -o $(CURDIR)/out/bench/grpclimit.test .
	@for i in $$(seq $(GRPC_BENCH_COUNT)); do \
		(cd grpclimit && $(CURDIR)/out/bench/grpclimit.test -test.run '^$$' -test.bench . -test.count=1 \
			-test.benchtime=$(GRPC_BENCH_TIME) -test.benchmem) >> out/bench/grpc.txt || exit 1; \
	done
	$(GO) tool -modfile=cmd/resultsmd/go.mod benchstat out/bench/grpc.txt
