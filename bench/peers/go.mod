module github.com/slidelimit/slidelimit/bench/peers

go 1.26.0

require (
	github.com/dgraph-io/ristretto/v2 v2.4.2
	github.com/didip/tollbooth/v7 v7.0.2
	github.com/go-chi/httprate v0.16.1
	github.com/go-redis/redis_rate/v10 v10.0.1
	github.com/redis/go-redis/v9 v9.23.0
	github.com/sethvargo/go-limiter v0.7.1
	github.com/slidelimit/slidelimit v0.0.0
	github.com/throttled/throttled/v2 v2.15.0
	github.com/ulule/limiter/v3 v3.11.2
	golang.org/x/time v0.16.0
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/dustin/go-humanize v1.0.1 // indirect
	github.com/go-pkgz/expirable-cache/v3 v3.0.0 // indirect
	github.com/hashicorp/golang-lru v0.5.4 // indirect
	github.com/klauspost/cpuid/v2 v2.4.0 // indirect
	github.com/pkg/errors v0.9.1 // indirect
	github.com/zeebo/xxh3 v1.1.0 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	golang.org/x/sys v0.48.0 // indirect
)

replace github.com/slidelimit/slidelimit => ../..
