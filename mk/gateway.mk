# Example gateway (issues 5 and 11): cmd/gateway in front of its builtin
# upstream, driven over loopback by the load generator's HTTP mode.
#
#   make gateway    build bin/gateway
#   make run-http   start bin/gateway (free ports, admin listener for
#                   /metrics) with $(RUN_HTTP_CONFIG) and its builtin
#                   upstream; run bin/loadgen straight at the upstream
#                   (out/loadgen-direct) and then through the gateway
#                   (out/loadgen-http) at the same rate and key stream;
#                   scrape the gateway's /metrics; stop it with SIGTERM;
#                   bin/httpjudge prints the end-to-end figures of both
#                   runs and judges the gateway's own objectives:
#                     decision p99 (the middleware's time, from /metrics) < $(RUN_HTTP_DECISION_P99)
#                     added latency p50 (through gateway - direct)        < $(RUN_HTTP_ADDED_P50)
#                   The loadgen's in-process 2 ms end-to-end p99 is not an
#                   objective here (a loopback round trip on a busy 2-core
#                   machine measures the scheduler); its latency check is
#                   set out of the way ($(RUN_HTTP_LOADGEN_P99)) and the
#                   figures are reported instead.
#                   Logs: out/gateway/gateway.log (stdout) and
#                   out/gateway/gateway.json.log (slog), metrics
#                   out/gateway/metrics.txt, verdict out/gateway/run-http.txt.
#
# The exit status is httpjudge's (0 pass, 1 objective missed, 2 bad input),
# or the gateway's if it failed to start or to stop cleanly, or the load
# generator's if it could not run (2).
GATEWAY_BIN     := bin/gateway
RUN_HTTP_CONFIG ?= cmd/gateway/run-http.yaml
# The limit the load generator checks the admitted count against: the
# default policy of $(RUN_HTTP_CONFIG), keyed by the X-API-Key header.
RUN_HTTP_LIMIT  ?= 100
RUN_HTTP_WINDOW ?= 1s
RUN_HTTP_FLAGS  ?= -rate 2000 -warmup 3s -duration 10s -keys 10000
RUN_HTTP_LOADGEN_P99  ?= 10s
RUN_HTTP_DECISION_P99 ?= 1ms
RUN_HTTP_ADDED_P50    ?= 5ms

.PHONY: gateway run-http

gateway:
	$(GO) build -o $(GATEWAY_BIN) ./cmd/gateway

run-http: gateway
	$(GO) build -o bin/loadgen ./cmd/loadgen
	$(GO) build -o bin/httpjudge ./cmd/gateway/httpjudge
	@mkdir -p out/gateway && : > out/gateway/gateway.log
	@$(GATEWAY_BIN) -config $(RUN_HTTP_CONFIG) -listen 127.0.0.1:0 -upstream builtin -pprof 127.0.0.1:0 \
		> out/gateway/gateway.log 2> out/gateway/gateway.json.log & gw=$$!; \
	trap 'kill -TERM $$gw 2>/dev/null; wait $$gw' INT TERM EXIT; \
	url=; i=0; while [ $$i -lt 300 ]; do \
		url=$$(sed -n 's/.*listening on \(http:[^,]*\),.*/\1/p' out/gateway/gateway.log); \
		[ -n "$$url" ] && break; kill -0 $$gw 2>/dev/null || break; sleep 0.1; i=$$((i+1)); \
	done; \
	if [ -z "$$url" ]; then echo "gateway did not start:"; cat out/gateway/gateway.log out/gateway/gateway.json.log; exit 1; fi; \
	up=$$(sed -n 's/.*builtin upstream on \(http:[^ ]*\).*/\1/p' out/gateway/gateway.log); \
	adm=$$(sed -n 's/.*metrics on \(http:[^ ]*\/metrics\).*/\1/p' out/gateway/gateway.log); \
	echo "gateway listening on $$url, upstream $$up, metrics $$adm"; \
	echo "run-http: 1/2 straight at the upstream"; \
	bin/loadgen -q -target $$up/ -header X-API-Key -limit $(RUN_HTTP_LIMIT) -window $(RUN_HTTP_WINDOW) \
		-p99 $(RUN_HTTP_LOADGEN_P99) -out out/loadgen-direct $(RUN_HTTP_FLAGS); rc1=$$?; \
	echo "run-http: 2/2 through the gateway"; \
	bin/loadgen -q -target $$url/ -header X-API-Key -limit $(RUN_HTTP_LIMIT) -window $(RUN_HTTP_WINDOW) \
		-p99 $(RUN_HTTP_LOADGEN_P99) -out out/loadgen-http $(RUN_HTTP_FLAGS); rc2=$$?; \
	curl -fsS $$adm > out/gateway/metrics.txt || wget -qO out/gateway/metrics.txt $$adm; \
	trap - INT TERM EXIT; kill -TERM $$gw; wait $$gw; gwrc=$$?; \
	cat out/gateway/gateway.log; \
	if [ $$gwrc -ne 0 ]; then echo "gateway exited with $$gwrc"; exit $$gwrc; fi; \
	if [ $$rc1 -gt 1 ] || [ $$rc2 -gt 1 ]; then echo "the load generator could not run ($$rc1, $$rc2)"; exit 2; fi; \
	bin/httpjudge -direct out/loadgen-direct/report.json -gateway out/loadgen-http/report.json \
		-metrics out/gateway/metrics.txt -decision-p99 $(RUN_HTTP_DECISION_P99) -added-p50 $(RUN_HTTP_ADDED_P50) \
		| tee out/gateway/run-http.txt; exit $${PIPESTATUS[0]}

.PHONY: httplimit-bench-smoke
## httplimit-bench-smoke (make test): the middleware benchmarks once each, so
## none rots; no time is judged.
httplimit-bench-smoke: testsummary
	$(call gotest,httplimit-bench-once,$(CURDIR),-run '^$$' -bench . -benchtime=1x ./httplimit/)

TEST_EXTRA += httplimit-bench-smoke
