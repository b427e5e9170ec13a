module github.com/slidelimit/slidelimit/grpclimit

go 1.24

require (
	github.com/grpc-ecosystem/go-grpc-middleware/v2 v2.3.2
	github.com/redis/go-redis/v9 v9.7.0
	github.com/slidelimit/slidelimit v0.0.0
	golang.org/x/time v0.12.0
	google.golang.org/genproto/googleapis/rpc v0.0.0-20250707201910-8d1bb00bc6a7
	google.golang.org/grpc v1.75.1
	google.golang.org/protobuf v1.36.8
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/dgryski/go-rendezvous v0.0.0-20200823014737-9f7001d12a5f // indirect
	golang.org/x/net v0.41.0 // indirect
	golang.org/x/sys v0.35.0 // indirect
	golang.org/x/text v0.26.0 // indirect
)

replace github.com/slidelimit/slidelimit => ..
