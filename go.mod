module github.com/slidelimit/slidelimit

go 1.24

require (
	github.com/HdrHistogram/hdrhistogram-go v1.4.0
	github.com/cespare/xxhash/v2 v2.3.0
	github.com/puzpuzpuz/xsync/v3 v3.5.1
	github.com/redis/go-redis/v9 v9.7.0
)

require github.com/dgryski/go-rendezvous v0.0.0-20200823014737-9f7001d12a5f // indirect
