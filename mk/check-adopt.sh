#!/usr/bin/env bash
# A new user's view of the module: a throwaway module on Go 1.24
# that already uses go-redis v9.7.0 adds github.com/slidelimit/slidelimit
# (through a replace directive to this checkout) and imports engine and
# httplimit. Adoption must not change its go directive, add a toolchain
# line or upgrade go-redis; and engine and httplimit must pull in nothing
# outside the standard library and this module (their key hash is
# hash/maphash: see internal/keyhash).
set -euo pipefail
GO=${GO:-go}
GO_FLOOR=${GO_FLOOR:-go1.24.11}
root=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "check-adopt: FAIL: $*" >&2; exit 1; }

cat > "$tmp/go.mod" <<MOD
module example.com/gateway

go 1.24

require github.com/redis/go-redis/v9 v9.7.0

require github.com/slidelimit/slidelimit v0.0.0

replace github.com/slidelimit/slidelimit => $root
MOD
cat > "$tmp/main.go" <<'SRC'
package main

import (
	"context"

	"github.com/redis/go-redis/v9"
	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/httplimit"
)

func main() {
	_ = redis.NewClient(&redis.Options{})
	l, err := engine.New(engine.Config{Algorithm: engine.SlidingLog, Limit: 1, Window: 1})
	if err != nil {
		panic(err)
	}
	_, _ = l.AllowNContext(context.Background(), "k", 1)
	_ = httplimit.ClientIP
}
SRC
cp "$tmp/go.mod" "$tmp/go.mod.before"

# The user's toolchain is Go 1.24 exactly: with GOTOOLCHAIN=go1.24.x (no
# +auto) a requirement of a newer Go fails instead of switching toolchains.
tc=$GO_FLOOR
if ! GOTOOLCHAIN=$tc "$GO" version >/dev/null 2>&1; then
	echo "check-adopt: $tc cannot be fetched; checking with the local toolchain (a go directive above 1.24 still shows in go.mod)"
	tc=local
fi
(cd "$tmp" && GOTOOLCHAIN=$tc GOFLAGS=-mod=mod "$GO" mod tidy >/dev/null 2>"$tmp/tidy.err") ||
	{ cat "$tmp/tidy.err" >&2; fail "go mod tidy of a Go 1.24 user module failed"; }
(cd "$tmp" && GOTOOLCHAIN=$tc "$GO" build ./... 2>"$tmp/build.err") ||
	{ cat "$tmp/build.err" >&2; fail "a Go 1.24 user module cannot build against slidelimit"; }

grep -qx 'go 1.24' "$tmp/go.mod" || fail "the user's go directive changed: $(grep '^go ' "$tmp/go.mod")"
! grep -q '^toolchain' "$tmp/go.mod" || fail "adoption added a toolchain line: $(grep '^toolchain' "$tmp/go.mod")"
grep -q 'github.com/redis/go-redis/v9 v9.7.0$' "$tmp/go.mod" ||
	fail "go-redis was upgraded: $(grep go-redis "$tmp/go.mod")"

deps=$(cd "$root" && "$GO" list -deps -f '{{if not .Standard}}{{.ImportPath}}{{end}}' ./engine ./httplimit |
	grep -v '^github.com/slidelimit/slidelimit' || true)
for d in $deps; do
	fail "engine/httplimit import $d (only the standard library and this module are allowed)"
done
echo "check-adopt: ok: a Go 1.24 module with go-redis v9.7.0 adopts slidelimit with go 1.24, no toolchain line, go-redis v9.7.0; engine+httplimit deps: ${deps:-none}"
