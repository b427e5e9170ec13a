package grpclimit

import (
	"context"
	"errors"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/ratelimit"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
)

// MiddlewareLimiter adapts a Limiter to go-grpc-middleware/v2's
// ratelimit.Limiter (Limit(ctx) error), for services whose interceptor
// chain already uses that package's interceptors.
type MiddlewareLimiter struct{ l *Limiter }

var _ ratelimit.Limiter = MiddlewareLimiter{}

// MiddlewareLimiter returns the adapter. What it keeps and what it loses:
// on a server, the call's method comes from grpc.Method(ctx), so rules by
// method apply, and the rate-limit metadata is set with grpc.SetHeader as
// the interceptors here set it. But go-grpc-middleware's interceptors
// replace the error Limit returns with a status of their own
// (codes.ResourceExhausted with the error's text in its message), so the
// RetryInfo and QuotaFailure details do not reach the client: use this
// package's interceptors where clients read them. On the client side no
// method is known: only rules without Methods (and Default) apply, and the
// key function gets "" as the method.
func (l *Limiter) MiddlewareLimiter() MiddlewareLimiter { return MiddlewareLimiter{l} }

// Limit decides the call in ctx: nil admits it; a refusal is an error
// whose text is the refusal's message (the rule and when to retry). A key
// error refused (Options.FailOpen false) and a backend failure refused
// (BackendFailClosed) are errors too, which go-grpc-middleware reports as
// ResourceExhausted.
func (m MiddlewareLimiter) Limit(ctx context.Context) error {
	method, _ := grpc.Method(ctx)
	v := m.l.decide(ctx, method)
	if v.headers {
		_ = grpc.SetHeader(ctx, v.metadata()) // fails harmlessly outside a server call
	}
	if v.pass {
		return nil
	}
	return errors.New(status.Convert(v.err).Message())
}
