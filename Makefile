# slidelimit Makefile. Component makefiles live in mk/*.mk and may append to
# TEST_DEPS (things `make test` must install or start first) and TEST_EXTRA
# (extra checks run after the unit tests, e.g. every benchmark once).
GO ?= go
TEST_DEPS :=
TEST_EXTRA :=

.DEFAULT_GOAL := help

-include mk/*.mk

.PHONY: help test vet unit
help:
	@echo "make run    - the main job: load test with a latency/GC verdict"
	@echo "make test   - go vet + go test -race ./... (+ what the tests need)"

## test: vet, then every test under -race, then the extra checks.
test: vet $(TEST_DEPS) unit $(TEST_EXTRA)

vet:
	$(GO) vet ./...

unit: vet $(TEST_DEPS)
	$(GO) test -race -count=1 ./...
