# slidelimit Makefile. Component makefiles live in mk/*.mk and may append to
# TEST_DEPS (things `make test` must install or start first) and TEST_EXTRA
# (extra checks run after the unit tests, e.g. every benchmark once).
#
# Test steps run `go test -json` through internal/testsummary ($(call
# gotest,...)): the screen shows one line per package and every failure, the
# raw output (benchmark rows included) goes to $(TEST_OUT)/STEP.jsonl, and
# `make test` ends with a summary of every step: packages, tests passed,
# failed and skipped, why each skip happened, what could not run here.
#
# No step is silent for long: each prints a line saying what it does and
# how long it usually takes; go test steps print a progress line after
# TICK_S seconds without output (testsummary -tick), and commands that
# print nothing while they work (go vet, go build, fetching a toolchain)
# run under $(call ticking,...), which does the same.
GO ?= go
SHELL := /bin/bash
TEST_DEPS :=
TEST_EXTRA :=
TEST_OUT := $(CURDIR)/out/test
TESTSUM  := $(TEST_OUT)/bin/testsummary
# Lines appended here are printed in the summary under "Not run on this machine".
TEST_NOTES := $(TEST_OUT)/notes.txt

TICK_S := 10

# $(call gotest,STEP,DIR,ARGS): go test -json ARGS in DIR, streamed through
# testsummary; fails when go test fails (pipefail) or a test failed. The
# step's first line is STEP and $(ABOUT_STEP), what it does and how long it
# usually takes.
define gotest
	@set -o pipefail; cd $(2) && $(GO) test -json $(3) 2>&1 | $(TESTSUM) stream -step $(1) -about "$(ABOUT_$(1))" -tick $(TICK_S)s -o $(TEST_OUT)/$(1).jsonl
endef

# $(call ticking,WHAT,COMMAND): run COMMAND and exit with its status; while
# it runs, print "... still WHAT (Ns)" every TICK_S seconds. It must start
# its recipe line (after "x &&" the ticker would take x into the
# background) and end it (it exits). The ticker's sleep has its output
# closed, so a pipe reading make's output ends when make does.
ticking = ( t0=$$SECONDS; while sleep $(TICK_S) </dev/null >/dev/null 2>&1; do echo "   ... still $(1) ($$((SECONDS - t0))s)"; done ) & tick=$$!; \
	$(2); rc=$$?; kill $$tick 2>/dev/null; wait $$tick 2>/dev/null; exit $$rc

# What each step does and how long it takes, measured on a 2-core machine
# that other work kept busy (load average 10-15), as a non-root user with
# CI=true: warm, Go's build and module caches filled by an earlier run
# (make test 5m40s); cold, both empty (make test 23m40s, with the module
# downloads and the Go 1.24 toolchain).
ABOUT_unit-race := every package's tests under the race detector (warm ~3 min, cold ~8 min)
ABOUT_engine-scale := the engine's 10 M-key and default-size tests, without -race (~40 s)
ABOUT_httplimit-bench-once := every middleware benchmark once, no time judged (a few seconds)

.DEFAULT_GOAL := help

-include mk/*.mk

.PHONY: help test test-steps vet unit testsummary test-under-load
help:
	@echo "make run              - the main job: load test with a latency/GC verdict"
	@echo "make test             - go vet + go test -race ./... (+ what the tests need), with a summary"
	@echo "make test-under-load  - make test 3 times in a row while two busy loops hold both cores"

## test: vet, then every test under -race, then the extra checks; a summary at the end.
## Steps keep going after a failure (make -k), so one failure does not hide another.
test:
	@rm -rf $(TEST_OUT) && mkdir -p $(TEST_OUT) && date +%s > $(TEST_OUT)/.start && : > $(TEST_NOTES)
	@echo "make test: vet, unit tests under -race, then: $(strip $(TEST_EXTRA))."
	@echo "make test: about 6 min with warm Go caches, 25 min cold (empty build and module caches; 2 busy cores); a line at least every $(TICK_S) s. Raw output: $(TEST_OUT)/"
	@$(MAKE) --no-print-directory -k test-steps; rc=$$?; \
	if [ -x $(TESTSUM) ]; then \
		$(TESTSUM) final -since $$(cat $(TEST_OUT)/.start) -notes $(TEST_NOTES) $$(ls $(TEST_OUT)/*.jsonl 2>/dev/null); src=$$?; \
	else src=1; fi; \
	if [ $$rc -ne 0 ] || [ $$src -ne 0 ]; then echo "make test: FAILED"; exit 1; fi; echo "make test: PASS"

test-steps: vet $(TEST_DEPS) unit $(TEST_EXTRA)

testsummary:
	@mkdir -p $(dir $(TESTSUM))
	@$(call ticking,building internal/testsummary,$(GO) build -o $(TESTSUM) ./internal/testsummary)

vet:
	@echo "== vet: go vet ./... (warm: seconds; cold ~5 min, it compiles every dependency first)"
	@$(call ticking,running go vet,$(GO) vet ./...)

unit: vet $(TEST_DEPS) testsummary
	$(call gotest,unit-race,$(CURDIR),-race -count=1 ./...)

## test-under-load: the flake check. Two busy loops hold both cores while
## make test runs three times in a row; any failure stops it.
test-under-load:
	@trap 'kill $$b1 $$b2 2>/dev/null' EXIT; \
	(while :; do :; done) & b1=$$!; (while :; do :; done) & b2=$$!; \
	for i in 1 2 3; do \
		echo "== test-under-load: run $$i of 3 (busy loops $$b1 $$b2)"; \
		$(MAKE) --no-print-directory test || { echo "test-under-load: run $$i FAILED"; exit 1; }; \
	done; echo "test-under-load: 3 of 3 runs passed with both cores busy"
