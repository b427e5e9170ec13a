# The Go 1.24 floor, proved on every `make test`:
#
#   test-go-floor  the unit tests once (no -race) with the oldest supported
#                  toolchain, fetched through the module proxy by GOTOOLCHAIN
#   check-adopt    a throwaway user module on Go 1.24 with go-redis v9.7.0
#                  adds slidelimit/engine and must keep both unchanged, and
#                  engine and httplimit must import nothing outside the
#                  standard library and this module
GO_FLOOR ?= go1.24.11

TEST_EXTRA += test-go-floor check-adopt
.PHONY: test-go-floor check-adopt

ABOUT_$(GO_FLOOR) := the unit tests once, without -race, under the oldest supported Go (warm ~2 min, cold ~3.5 min: a build of its own)

test-go-floor: testsummary
	@echo "== $(GO_FLOOR): fetching the toolchain through the module proxy unless it is cached (a ~75 MB download the first time)"
	@if ! ( $(call ticking,fetching $(GO_FLOOR),GOTOOLCHAIN=$(GO_FLOOR) $(GO) version >/dev/null 2>&1) ); then \
		echo "*** $(GO_FLOOR) cannot be fetched (no module proxy?): the Go 1.24 test run is SKIPPED"; \
		mkdir -p $(TEST_OUT); echo "$(GO_FLOOR) toolchain could not be fetched through the module proxy: the unit tests did not run under Go 1.24" >> $(TEST_NOTES); \
		exit 0; \
	fi; set -o pipefail; GOTOOLCHAIN=$(GO_FLOOR) $(GO) test -json -count=1 ./... 2>&1 | \
		$(TESTSUM) stream -step $(GO_FLOOR) -about "$(ABOUT_$(GO_FLOOR))" -tick $(TICK_S)s -o $(TEST_OUT)/$(GO_FLOOR).jsonl

check-adopt:
	@echo "== check-adopt: a throwaway Go 1.24 module that uses go-redis v9.7.0 adds slidelimit: go mod tidy and go build must keep its go line and go-redis (a few seconds)"
	@$(call ticking,checking adoption,GO="$(GO)" GO_FLOOR=$(GO_FLOOR) bash mk/check-adopt.sh)
