#!/usr/bin/env bash
# The example gateway (cmd/gateway) against nginx with limit_req, in front
# of the same upstream, measured by wrk: the latency each proxy adds at the
# median and the 99th percentile, at 1 and at 32 connections, and the
# throughput, in interleaved rounds. Used by `make bench-gateway`.
#
#   bench/gateway-vs-nginx.sh [OUT]     (default out/bench/gateway.txt)
#
# Settings (environment): ROUNDS (default 5), DURATION per wrk run (5s),
# CONNS (connection counts, "1 32"), WRK_THREADS (1), GATEWAY_BIN
# (bin/gateway, built by make bench-gateway), NGINX_WORKERS (auto: one per
# CPU, as the gateway's GOMAXPROCS), START_TIMEOUT (seconds a gateway has
# to say it is listening, 30).
#
# The setup:
#   upstream  nginx, one worker, answering every request 200 "ok\n"
#             (text/plain) with no access log: nothing of Go's in it, the
#             same for both proxies.
#   nginx     limit_req per $binary_remote_addr (a 10 MB zone, 1M r/s,
#             burst 1M: nothing is refused), proxy_pass to the upstream
#             over keep-alive connections (proxy_http_version 1.1, keepalive
#             64), the X-Forwarded-For/-Proto/-Host and Forwarded headers
#             the gateway also sets, no access log.
#   gateway   bin/gateway with one default rule keyed by client IP (counter,
#             1M per 1 s window: nothing is refused), no access log.
#   direct    wrk straight at the upstream: the baseline the added latency
#             is measured from.
#
# Each round runs wrk once per connection count against each target, the
# target order rotated every round (direct, nginx, gateway; then nginx,
# gateway, direct; ...), so a noisy minute hits all alike and none is
# always first. A warm-up run per target comes first. Every run must get
# only 2xx answers, or the script fails: a refused or failed request would
# make a proxy look faster than it is.
#
# The output is in Go benchmark format, one line per run:
#   BenchmarkGateway/conns=<c>/impl=<direct|nginx|gateway> 1 <p50> p50-ns <p99> p99-ns <rate> req/s
# which cmd/resultsmd turns into RESULTS.md's gateway table.
#
# nginx and wrk come from Debian: installed with apt-get when absent and
# this runs as root (the nginx service the package would start on port 80
# is kept from starting, and disabled); otherwise the script says so loudly and exits 0,
# removing any OUT an earlier run left (RESULTS.md then says the table was
# not measured).
set -euo pipefail

OUT=${1:-out/bench/gateway.txt}
ROUNDS=${ROUNDS:-5}
DURATION=${DURATION:-5s}
CONNS=${CONNS:-"1 32"}
WRK_THREADS=${WRK_THREADS:-1}
GATEWAY_BIN=${GATEWAY_BIN:-bin/gateway}
NGINX_WORKERS=${NGINX_WORKERS:-auto}
PROFILE=${PROFILE:-}
PROFILE_SECONDS=${PROFILE_SECONDS:-10}
BASELINE_BIN=${BASELINE_BIN:-}
START_TIMEOUT=${START_TIMEOUT:-30}

# skip says loudly why nothing was measured and exits 0. A table an
# earlier run left at OUT is removed: the report would otherwise show it,
# from another binary or another machine, as this run's.
skip() {
	rm -f "$OUT" "$OUT.partial"
	echo "*** bench-gateway SKIPPED: $*" >&2
	echo "*** to run it: apt-get install -y nginx wrk (as root), then make bench-gateway" >&2
	exit 0
}

if ! command -v nginx >/dev/null 2>&1 && [ -x /usr/sbin/nginx ]; then PATH=$PATH:/usr/sbin; fi
if ! command -v nginx >/dev/null 2>&1 || ! command -v wrk >/dev/null 2>&1; then
	if [ "$(id -u)" != 0 ]; then
		skip "nginx or wrk is missing and installing them (Debian packages) needs root"
	fi
	command -v apt-get >/dev/null 2>&1 || skip "nginx or wrk is missing and there is no apt-get to install them"
	pkgs=()
	command -v nginx >/dev/null 2>&1 || pkgs+=(nginx)
	command -v wrk >/dev/null 2>&1 || pkgs+=(wrk)
	echo "installing ${pkgs[*]} (Debian packages) for the gateway benchmark"
	export DEBIAN_FRONTEND=noninteractive
	# Debian's nginx package starts its service as it installs (a default
	# site on port 80 of every interface) and enables it at boot. This
	# script runs its own nginx, on loopback only, for the run only: while
	# it installs, a policy-rc.d (how Debian tells maintainer scripts not to
	# start services) refuses every start, unless the system has its own
	# policy; the service is then disabled and stopped (in case the
	# system's policy let it start).
	policy=/usr/sbin/policy-rc.d
	made_policy=
	if [ ! -e "$policy" ]; then
		trap 'rm -f "$policy"' EXIT
		trap 'exit 130' INT TERM # through the EXIT trap
		printf '#!/bin/sh\n# bench/gateway-vs-nginx.sh: no service starts while it installs nginx\nexit 101\n' > "$policy"
		chmod 755 "$policy"
		made_policy=1
	fi
	apt-get install -y --no-install-recommends "${pkgs[@]}" >/dev/null 2>&1 ||
		{ apt-get update >/dev/null && apt-get install -y --no-install-recommends "${pkgs[@]}" >/dev/null; } ||
		skip "apt-get could not install ${pkgs[*]}"
	if [ -n "$made_policy" ]; then
		rm -f "$policy"
		trap - EXIT
	fi
	PATH=$PATH:/usr/sbin
	if [ "${pkgs[0]}" = nginx ]; then
		if command -v systemctl >/dev/null 2>&1; then
			systemctl disable nginx.service >/dev/null 2>&1 || true
			systemctl stop nginx.service >/dev/null 2>&1 || true
		fi
		if command -v update-rc.d >/dev/null 2>&1 && [ -x /etc/init.d/nginx ]; then
			update-rc.d nginx disable >/dev/null 2>&1 || true
			invoke-rc.d nginx stop >/dev/null 2>&1 || true
		fi
	fi
fi
[ -x "$GATEWAY_BIN" ] || { echo "gateway-vs-nginx: $GATEWAY_BIN not found (make gateway builds it)" >&2; exit 1; }

work=$(mktemp -d "${TMPDIR:-/tmp}/gateway-vs-nginx.XXXXXX")
chmod 755 "$work"
# pids are the background processes this script started (the gateways,
# the profile's wrk), each added the moment it starts: a failure at any
# point stops every one of them, a gateway that never came up included.
pids=()
cleanup() {
	for conf in proxy upstream; do
		if [ -f "$work/$conf.pid" ]; then kill -QUIT "$(cat "$work/$conf.pid")" 2>/dev/null || true; fi
	done
	for pid in ${pids[@]+"${pids[@]}"}; do kill -TERM "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; done
	sleep 0.2
	rm -rf "$work"
	rm -f "$OUT.partial" # a run that failed leaves no half table behind
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# freeport prints a loopback port nothing listens on (a connect is refused).
freeport() {
	local p
	for _ in $(seq 100); do
		p=$((20000 + RANDOM % 30000))
		if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
			echo "$p"
			return
		fi
	done
	echo "gateway-vs-nginx: no free port found" >&2
	return 1
}

# A root master would hand its workers to nginx's compiled-in user; they
# stay root here so they can use the temporary directory.
user=
[ "$(id -u)" = 0 ] && user="user root;"
common="$user
pid PIDFILE;
error_log $work/ERRLOG warn;
events { worker_connections 4096; }"
temps="client_body_temp_path $work/body; proxy_temp_path $work/proxy; fastcgi_temp_path $work/fastcgi; uwsgi_temp_path $work/uwsgi; scgi_temp_path $work/scgi;"

up_port=$(freeport)
cat > "$work/upstream.conf" <<EOF
${common//PIDFILE/$work/upstream.pid}
worker_processes 1;
http {
	$temps
	access_log off;
	server {
		listen 127.0.0.1:$up_port;
		location / {
			default_type "text/plain; charset=utf-8";
			return 200 "ok\n";
		}
	}
}
EOF
sed -i "s|ERRLOG|upstream.err|" "$work/upstream.conf"

ng_port=$(freeport)
cat > "$work/proxy.conf" <<EOF
${common//PIDFILE/$work/proxy.pid}
worker_processes $NGINX_WORKERS;
http {
	$temps
	access_log off;
	limit_req_zone \$binary_remote_addr zone=perip:10m rate=1000000r/s;
	upstream up {
		server 127.0.0.1:$up_port;
		keepalive 64;
	}
	server {
		listen 127.0.0.1:$ng_port;
		location / {
			limit_req zone=perip burst=1000000 nodelay;
			proxy_pass http://up;
			proxy_http_version 1.1;
			proxy_set_header Connection "";
			proxy_set_header Host \$host;
			proxy_set_header X-Forwarded-For \$remote_addr;
			proxy_set_header X-Forwarded-Proto \$scheme;
			proxy_set_header X-Forwarded-Host \$host;
			proxy_set_header Forwarded "for=\$remote_addr;host=\\"\$host\\";proto=\$scheme";
		}
	}
}
EOF
sed -i "s|ERRLOG|proxy.err|" "$work/proxy.conf"

cat > "$work/gateway.yaml" <<EOF
rate_limiting:
  sliding_window:
    window_size_ms: 1000
    max_requests: 1000000
    memory_limit_mb: 64
  algorithm: counter
  key: ip
server:
  max_connections_per_ip: -1
log:
  access: false
  deny_sample: -1
EOF

nginx -p "$work" -c "$work/upstream.conf"
nginx -p "$work" -c "$work/proxy.conf"
# start_gateway BIN NAME: runs BIN with the benchmark's config, sets
# started_pid and started_url.
start_gateway() {
	local bin=$1 name=$2 u= extra=()
	[ -n "$PROFILE" ] && [ "$name" = gateway ] && extra=(-pprof 127.0.0.1:0)
	"$bin" -config "$work/gateway.yaml" -listen 127.0.0.1:0 -upstream "http://127.0.0.1:$up_port" "${extra[@]}" \
		> "$work/$name.log" 2> "$work/$name.err" &
	started_pid=$!
	pids+=("$started_pid")
	for _ in $(seq $((START_TIMEOUT * 10))); do
		u=$(sed -n 's/.*listening on \(http:[^,]*\),.*/\1/p' "$work/$name.log")
		[ -n "$u" ] && break
		kill -0 "$started_pid" 2>/dev/null || break
		sleep 0.1
	done
	if [ -z "$u" ]; then
		echo "gateway-vs-nginx: $bin did not start (no \"listening on\" within ${START_TIMEOUT}s):" >&2
		cat "$work/$name.log" "$work/$name.err" >&2
		exit 1
	fi
	started_url=$u
}
start_gateway "$GATEWAY_BIN" gateway
gw_url=$started_url
targets=(direct nginx gateway)
declare -A url=([direct]="http://127.0.0.1:$up_port/" [nginx]="http://127.0.0.1:$ng_port/" [gateway]="$gw_url/")
if [ -n "$BASELINE_BIN" ]; then
	start_gateway "$BASELINE_BIN" gateway-baseline
	url[gateway-baseline]="$started_url/"
	targets+=(gateway-baseline)
fi

# get URL prints the body of a GET (curl or wget, whichever is there).
get() {
	if command -v curl >/dev/null 2>&1; then curl -fsS "$1"; else wget -qO- "$1"; fi
}
for t in "${targets[@]}"; do
	if ! body=$(get "${url[$t]}" 2>&1) || [ "$body" != ok ]; then
		echo "gateway-vs-nginx: $t (${url[$t]}) does not answer ok: $body" >&2
		cat "$work"/*.err >&2 || true
		exit 1
	fi
done

# to_ns converts one of wrk's durations (52.00us, 1.20ms, 2.00s) to ns.
to_ns() {
	awk -v v="$1" 'BEGIN {
		n = v + 0; u = v; sub(/^[0-9.]+/, "", u)
		m = (u == "us") ? 1e3 : (u == "ms") ? 1e6 : (u == "s") ? 1e9 : (u == "m") ? 6e10 : (u == "ns") ? 1 : -1
		if (m < 0) { print "bad"; exit }
		printf "%.0f", n * m
	}'
}

# measure TARGET CONNS [DURATION]: one wrk run, one benchmark line to stdout.
measure() {
	local t=$1 c=$2 d=${3:-$DURATION} out p50 p99 rps bad
	out=$(wrk -t "$WRK_THREADS" -c "$c" -d "$d" --latency "${url[$t]}")
	bad=$(printf '%s\n' "$out" | sed -n 's/.*Non-2xx or 3xx responses: *\([0-9]*\).*/\1/p')
	if [ -n "$bad" ] || printf '%s\n' "$out" | grep -q "Socket errors"; then
		echo "gateway-vs-nginx: $t at $c connections had failed or refused requests:" >&2
		printf '%s\n' "$out" >&2
		exit 1
	fi
	p50=$(to_ns "$(printf '%s\n' "$out" | awk '$1 == "50%" {print $2}')")
	p99=$(to_ns "$(printf '%s\n' "$out" | awk '$1 == "99%" {print $2}')")
	rps=$(printf '%s\n' "$out" | awk '$1 == "Requests/sec:" {print $2}')
	if [ -z "$p50" ] || [ "$p50" = bad ] || [ -z "$p99" ] || [ "$p99" = bad ] || [ -z "$rps" ]; then
		echo "gateway-vs-nginx: could not read wrk's output for $t:" >&2
		printf '%s\n' "$out" >&2
		exit 1
	fi
	echo "BenchmarkGateway/conns=$c/impl=$t 1 $p50 p50-ns $p99 p99-ns $rps req/s"
}

mkdir -p "$(dirname "$OUT")"
tmp=$OUT.partial
{
	echo "gateway-setup: wrk (${WRK_THREADS} thread, ${DURATION} per run) against nginx (limit_req per IP that refuses nothing, proxy_pass over keep-alive) and bin/gateway (one counter rule per IP that refuses nothing), both in front of one nginx upstream answering 200 ok; direct is wrk straight at the upstream; all on one machine, $(nproc) CPUs shared by wrk, the proxies and the upstream"
	echo "gateway-rounds: $ROUNDS, targets in rotated order each round"
	echo "nginx-version: $(nginx -v 2>&1 | sed 's/^nginx version: //'), worker_processes $NGINX_WORKERS"
	echo "wrk-version: $(wrk -v 2>&1 | head -1 | awk '{print $1, $2}')"
	echo "gateway-command: ROUNDS=$ROUNDS DURATION=$DURATION CONNS=\"$CONNS\" WRK_THREADS=$WRK_THREADS bench/gateway-vs-nginx.sh"
} > "$tmp"

echo "gateway-vs-nginx: upstream :$up_port, nginx :$ng_port, gateway $gw_url; warming up"
for t in "${targets[@]}"; do
	for c in $CONNS; do measure "$t" "$c" 1s > /dev/null; done
done
order=("${targets[@]}")
for r in $(seq "$ROUNDS"); do
	echo "gateway-vs-nginx: round $r of $ROUNDS (${order[*]})"
	for c in $CONNS; do
		for t in "${order[@]}"; do
			measure "$t" "$c" | tee -a "$tmp"
		done
	done
	order=("${order[@]:1}" "${order[0]}")
done
mv "$tmp" "$OUT"
echo "wrote $OUT"

if [ -n "$PROFILE" ]; then
	dbg=$(sed -n 's/.*debug endpoints on \(http:[^ ]*\/debug\/pprof\/\).*/\1/p' "$work/gateway.log")
	last=${CONNS##* }
	echo "gateway-vs-nginx: CPU profile of the gateway, ${PROFILE_SECONDS}s of wrk at $last connections, to $PROFILE"
	wrk -t "$WRK_THREADS" -c "$last" -d "$((PROFILE_SECONDS + 2))s" "${url[gateway]}" > /dev/null &
	wrkpid=$!
	pids+=("$wrkpid")
	sleep 1
	get "${dbg}profile?seconds=$PROFILE_SECONDS" > "$PROFILE"
	wait "$wrkpid"
	unset 'pids[-1]' # reaped: its pid may be reused, never to be signalled
fi
