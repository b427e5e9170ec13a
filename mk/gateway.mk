# Example gateway (issue 5): cmd/gateway in front of a builtin upstream,
# driven over loopback by the load generator's HTTP mode.
#
#   make gateway    build bin/gateway
#   make run-http   start bin/gateway on 127.0.0.1 (free port) with
#                   $(GATEWAY_CONFIG) and its builtin upstream, run bin/loadgen
#                   against it, stop the gateway with SIGTERM; the gateway's
#                   log is out/gateway/gateway.log, the load report
#                   out/loadgen-http/report.{html,json}
#
# The exit status is the load generator's (0 pass, 1 objective missed, 2 bad
# flags), or the gateway's if it failed to start or to stop cleanly.
GATEWAY_BIN     := bin/gateway
GATEWAY_CONFIG  ?= cmd/gateway/gateway.example.yaml
# The limit the load generator checks the admitted count against: the
# default policy of $(GATEWAY_CONFIG), keyed by the X-API-Key header.
RUN_HTTP_LIMIT  ?= 100
RUN_HTTP_WINDOW ?= 1s
RUN_HTTP_FLAGS  ?= -rate 2000 -warmup 3s -duration 10s -keys 10000

.PHONY: gateway run-http

gateway:
	$(GO) build -o $(GATEWAY_BIN) ./cmd/gateway

run-http: gateway
	$(GO) build -o bin/loadgen ./cmd/loadgen
	@mkdir -p out/gateway && : > out/gateway/gateway.log
	@$(GATEWAY_BIN) -config $(GATEWAY_CONFIG) -listen 127.0.0.1:0 -upstream builtin \
		> out/gateway/gateway.log 2>&1 & gw=$$!; \
	trap 'kill -TERM $$gw 2>/dev/null; wait $$gw' INT TERM EXIT; \
	url=; i=0; while [ $$i -lt 300 ]; do \
		url=$$(sed -n 's/.*listening on \(http:[^,]*\),.*/\1/p' out/gateway/gateway.log); \
		[ -n "$$url" ] && break; kill -0 $$gw 2>/dev/null || break; sleep 0.1; i=$$((i+1)); \
	done; \
	if [ -z "$$url" ]; then echo "gateway did not start:"; cat out/gateway/gateway.log; exit 1; fi; \
	echo "gateway listening on $$url"; \
	bin/loadgen -target $$url/ -header X-API-Key -limit $(RUN_HTTP_LIMIT) -window $(RUN_HTTP_WINDOW) \
		-out out/loadgen-http $(RUN_HTTP_FLAGS); rc=$$?; \
	trap - INT TERM EXIT; kill -TERM $$gw; wait $$gw; gwrc=$$?; \
	cat out/gateway/gateway.log; \
	if [ $$gwrc -ne 0 ]; then echo "gateway exited with $$gwrc"; exit $$gwrc; fi; \
	exit $$rc

.PHONY: httplimit-bench-smoke
## httplimit-bench-smoke (make test): the middleware benchmarks once each, so
## none rots; no time is judged.
httplimit-bench-smoke: testsummary
	$(call gotest,httplimit-bench-once,$(CURDIR),-run '^$$' -bench . -benchtime=1x ./httplimit/)

TEST_EXTRA += httplimit-bench-smoke
