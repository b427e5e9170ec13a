# Example gateway: cmd/gateway in front of its builtin
# upstream, driven over loopback by the load generator's HTTP mode. The
# gateway is a module of its own (cmd/gateway/go.mod: it requires
# Prometheus, through promlimit, and the YAML decoder, which the library's
# module does not), so it is built and tested from its directory.
#
#   make gateway    build bin/gateway
#   make run-http   start bin/gateway (free ports, admin listener for
#                   /metrics) with $(RUN_HTTP_CONFIG) and its builtin
#                   upstream, then:
#                     1/3 bin/loadgen straight at the upstream (out/loadgen-direct)
#                     2/3 bin/loadgen through the gateway, same rate and keys
#                         (out/loadgen-http)
#                     3/3 bin/httpjudge probe: $(RUN_HTTP_PROBE_PAIRS) requests one at a
#                         time, alternately straight and through the gateway,
#                         timing each call alone (out/gateway/probe.json)
#                   scrape the gateway's /metrics, stop it with SIGTERM, and
#                   let bin/httpjudge report the load runs' end-to-end
#                   figures (latency from intended start, service time,
#                   rate) and judge what the gateway itself controls:
#                     decision p99 (the middleware's time, /metrics)  < $(RUN_HTTP_DECISION_P99)
#                     added latency p50 (probe: gateway - direct per pair) < $(RUN_HTTP_ADDED_P50)
#                     errors through the gateway                      0
#                     rate sustained through the gateway              99% to 101% of -rate
#                   (over 101% means a warm-up backlog drained inside the
#                   window: the generator had fallen behind). The load runs'
#                   own verdicts (their latency check is set out of the way,
#                   $(RUN_HTTP_LOADGEN_P99)) go to out/loadgen-*/stdout.txt.
#                   Logs: out/gateway/gateway.log (stdout) and
#                   out/gateway/gateway.json.log (slog), metrics
#                   out/gateway/metrics.txt, verdict out/gateway/run-http.txt.
#
# Exit status: make exits 0 when every objective is met and 2 (make's own
# status for any failed recipe) otherwise; the last line printed says why:
# httpjudge's status (1 an objective missed, 2 bad input, 3 inconclusive:
# the generator could not sustain the rate straight to the upstream either,
# so the machine, not the gateway, is the limit), the gateway's exit status
# if it failed to start or stop cleanly, or a load generator that could not
# run.
GATEWAY_BIN     := bin/gateway
RUN_HTTP_CONFIG ?= cmd/gateway/run-http.yaml
# The limit the load generator checks the admitted count against: the
# default policy of $(RUN_HTTP_CONFIG), keyed by the X-API-Key header.
RUN_HTTP_LIMIT  ?= 100
RUN_HTTP_WINDOW ?= 1s
RUN_HTTP_FLAGS  ?= -rate 2000 -warmup 3s -duration 10s -keys 10000
RUN_HTTP_PROBE_PAIRS  ?= 2000
RUN_HTTP_LOADGEN_P99  ?= 10s
RUN_HTTP_DECISION_P99 ?= 1ms
RUN_HTTP_ADDED_P50    ?= 5ms

.PHONY: gateway run-http gateway-test gateway-go-floor

gateway:
	cd cmd/gateway && $(GO) build -o $(CURDIR)/$(GATEWAY_BIN) .

run-http: gateway
	$(GO) build -o bin/loadgen ./cmd/loadgen
	cd cmd/gateway && $(GO) build -o $(CURDIR)/bin/httpjudge ./httpjudge
	@mkdir -p out/gateway out/loadgen-direct out/loadgen-http && : > out/gateway/gateway.log
	@$(GATEWAY_BIN) -config $(RUN_HTTP_CONFIG) -listen 127.0.0.1:0 -upstream builtin -pprof 127.0.0.1:0 \
		> out/gateway/gateway.log 2> out/gateway/gateway.json.log & gw=$$!; \
	trap 'kill -TERM $$gw 2>/dev/null; wait $$gw' INT TERM EXIT; \
	url=; i=0; while [ $$i -lt 300 ]; do \
		url=$$(sed -n 's/.*listening on \(http:[^,]*\),.*/\1/p' out/gateway/gateway.log); \
		[ -n "$$url" ] && break; kill -0 $$gw 2>/dev/null || break; sleep 0.1; i=$$((i+1)); \
	done; \
	if [ -z "$$url" ]; then echo "gateway did not start:"; cat out/gateway/gateway.log out/gateway/gateway.json.log; \
		echo "run-http: FAIL (the gateway did not start)"; exit 1; fi; \
	up=$$(sed -n 's/.*builtin upstream on \(http:[^ ]*\).*/\1/p' out/gateway/gateway.log); \
	adm=$$(sed -n 's/.*metrics on \(http:[^ ]*\/metrics\).*/\1/p' out/gateway/gateway.log); \
	echo "gateway listening on $$url, upstream $$up, metrics $$adm"; \
	echo "run-http: 1/3 load straight at the upstream"; \
	bin/loadgen -q -target $$up/ -header X-API-Key -limit $(RUN_HTTP_LIMIT) -window $(RUN_HTTP_WINDOW) \
		-p99 $(RUN_HTTP_LOADGEN_P99) -out out/loadgen-direct $(RUN_HTTP_FLAGS) > out/loadgen-direct/stdout.txt; rc1=$$?; \
	echo "run-http: 2/3 the same load through the gateway"; \
	bin/loadgen -q -target $$url/ -header X-API-Key -limit $(RUN_HTTP_LIMIT) -window $(RUN_HTTP_WINDOW) \
		-p99 $(RUN_HTTP_LOADGEN_P99) -out out/loadgen-http $(RUN_HTTP_FLAGS) > out/loadgen-http/stdout.txt; rc2=$$?; \
	echo "run-http: 3/3 interleaved probe, $(RUN_HTTP_PROBE_PAIRS) pairs"; \
	bin/httpjudge probe -direct $$up/ -gateway $$url/ -n $(RUN_HTTP_PROBE_PAIRS) -out out/gateway/probe.json; rc3=$$?; \
	curl -fsS $$adm > out/gateway/metrics.txt || wget -qO out/gateway/metrics.txt $$adm; \
	trap - INT TERM EXIT; kill -TERM $$gw; wait $$gw; gwrc=$$?; \
	cat out/gateway/gateway.log; \
	if [ $$gwrc -ne 0 ]; then echo "run-http: FAIL (the gateway exited with $$gwrc)"; exit $$gwrc; fi; \
	if [ $$rc1 -gt 1 ] || [ $$rc2 -gt 1 ] || [ $$rc3 -ne 0 ]; then \
		echo "run-http: FAIL (a load run or the probe could not run: $$rc1, $$rc2, $$rc3; see out/loadgen-*/stdout.txt)"; exit 2; fi; \
	bin/httpjudge -direct out/loadgen-direct/report.json -gateway out/loadgen-http/report.json \
		-probe out/gateway/probe.json -metrics out/gateway/metrics.txt \
		-decision-p99 $(RUN_HTTP_DECISION_P99) -added-p50 $(RUN_HTTP_ADDED_P50) > out/gateway/run-http.txt; jrc=$$?; \
	cat out/gateway/run-http.txt; \
	case $$jrc in \
		0) echo "run-http: PASS";; \
		1) echo "run-http: FAIL (httpjudge exit 1: an objective was missed)";; \
		3) echo "run-http: INCONCLUSIVE (httpjudge exit 3: the machine could not offer the load even without the gateway)";; \
		*) echo "run-http: FAIL (httpjudge exit $$jrc: bad input)";; \
	esac; exit $$jrc

## gateway-test (make test): vet and race tests of the gateway's module
## (./... of the root module skips it), then its tests once with the
## oldest supported toolchain ($(GO_FLOOR), mk/compat.mk).
TEST_EXTRA += gateway-test gateway-go-floor
ABOUT_gateway-race := the gateway's tests under the race detector, its own module (~40 s; ~2 min cold)
ABOUT_gateway-go-floor := the gateway's tests once, without -race, under the oldest supported Go (~40 s)

gateway-test: testsummary
	@echo "== go vet (cmd/gateway, its own module)"
	@$(call ticking,running go vet on cmd/gateway,cd cmd/gateway && $(GO) vet ./...)
	$(call gotest,gateway-race,$(CURDIR)/cmd/gateway,-race -count=1 ./...)

gateway-go-floor: testsummary
	@if ! GOTOOLCHAIN=$(GO_FLOOR) $(GO) version >/dev/null 2>&1; then \
		echo "*** $(GO_FLOOR) cannot be fetched (no module proxy?): the gateway's Go 1.24 run is SKIPPED"; \
		mkdir -p $(TEST_OUT); echo "$(GO_FLOOR) toolchain could not be fetched: the gateway module's tests did not run under Go 1.24" >> $(TEST_NOTES); \
		exit 0; \
	fi; set -o pipefail; cd cmd/gateway && GOTOOLCHAIN=$(GO_FLOOR) $(GO) test -json -count=1 ./... 2>&1 | \
		$(TESTSUM) stream -step gateway-go-floor -about "$(ABOUT_gateway-go-floor)" -tick $(TICK_S)s -o $(TEST_OUT)/gateway-go-floor.jsonl

## promtool-dep: install promtool (Debian's prometheus package) if it is not
## on PATH, for gateway-alerts. The package also ships a Prometheus server
## that systemd would start (port 9090): it is stopped and disabled, since
## only promtool is wanted.
promtool-dep:
	@if command -v promtool >/dev/null 2>&1; then exit 0; fi; \
	if [ "$$(id -u)" -ne 0 ]; then \
		echo "*** promtool is missing and installing it needs root: the alert rule checks (gateway-alerts) will be SKIPPED."; \
		echo "*** To run them: sudo apt-get update && sudo apt-get install -y --no-install-recommends prometheus"; \
		mkdir -p $(TEST_OUT); echo "promtool not installed and not root: cmd/gateway/alerts.yml was neither checked (promtool check rules) nor unit-tested (promtool test rules alerts_test.yml); install Debian's prometheus package to run them" >> $(TEST_NOTES); \
		exit 0; \
	fi; \
	echo "installing promtool (Debian package prometheus, ~15 s) for the alert rule checks"; \
	DEBIAN_FRONTEND=noninteractive apt-get update && \
	DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends prometheus && \
	command -v promtool && \
	{ systemctl disable --now prometheus >/dev/null 2>&1 || true; }

TEST_DEPS += promtool-dep

## gateway-alerts (make test): promtool check rules on cmd/gateway/alerts.yml
## and its unit tests (promtool test rules alerts_test.yml: series in,
## alerts out), run by the gateway's Go test TestAlertRulesPassPromtool,
## which skips, saying so, without promtool; and the check that every
## metric the rules and dashboard.json use is one the gateway exports.
TEST_EXTRA += gateway-alerts
ABOUT_gateway-alerts := promtool check rules and promtool test rules on the gateway's alerts.yml, and its metric names against the gateway's /metrics (a few seconds)
.PHONY: promtool-dep gateway-alerts

gateway-alerts: testsummary promtool-dep
	$(call gotest,gateway-alerts,$(CURDIR)/cmd/gateway,-count=1 -run '^TestAlertRules' .)

.PHONY: httplimit-bench-smoke
## httplimit-bench-smoke (make test): the middleware benchmarks once each, so
## none rots; no time is judged.
httplimit-bench-smoke: testsummary
	$(call gotest,httplimit-bench-once,$(CURDIR),-run '^$$' -bench . -benchtime=1x ./httplimit/)

TEST_EXTRA += httplimit-bench-smoke
