# The Go 1.24 floor (issue 12), proved on every `make test`:
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

test-go-floor: testsummary
	@if ! GOTOOLCHAIN=$(GO_FLOOR) $(GO) version >/dev/null 2>&1; then \
		echo "*** $(GO_FLOOR) cannot be fetched (no module proxy?): the Go 1.24 test run is SKIPPED"; \
		mkdir -p $(TEST_OUT); echo "$(GO_FLOOR) toolchain could not be fetched through the module proxy: the unit tests did not run under Go 1.24" >> $(TEST_NOTES); \
		exit 0; \
	fi; set -o pipefail; GOTOOLCHAIN=$(GO_FLOOR) $(GO) test -json -count=1 ./... 2>&1 | \
		$(TESTSUM) stream -step $(GO_FLOOR) -o $(TEST_OUT)/$(GO_FLOOR).jsonl

check-adopt:
	@GO="$(GO)" GO_FLOOR=$(GO_FLOOR) bash mk/check-adopt.sh
