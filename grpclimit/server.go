package grpclimit

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/slidelimit/slidelimit/engine"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
)

// Metadata keys of the rate-limit fields (gRPC metadata keys are lower
// case): draft-ietf-httpapi-ratelimit-headers-11's RateLimit-Policy and
// RateLimit, and Retry-After on refusals.
const (
	MDPolicy     = "ratelimit-policy"
	MDRateLimit  = "ratelimit"
	MDRetryAfter = "retry-after"
)

// UnaryServerInterceptor limits unary calls. A decided call carries the
// rate-limit metadata in its response header (grpc.SetHeader); a refused
// one ends with codes.ResourceExhausted before the handler runs.
func (l *Limiter) UnaryServerInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		v := l.decide(ctx, info.FullMethod)
		if v.headers {
			// Fails only without a server stream in ctx (not a real
			// call) or after the header went out (not yet, here).
			_ = grpc.SetHeader(ctx, v.metadata())
		}
		if !v.pass {
			return nil, v.err
		}
		return handler(ctx, req)
	}
}

// StreamServerInterceptor limits stream opens: each stream takes Cost
// units once, when it opens, whatever it carries afterwards. A refused
// stream ends with codes.ResourceExhausted before the handler runs.
func (l *Limiter) StreamServerInterceptor() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		v := l.decide(ss.Context(), info.FullMethod)
		if v.headers {
			_ = ss.SetHeader(v.metadata())
		}
		if !v.pass {
			return v.err
		}
		return handler(srv, ss)
	}
}

// UnaryClientInterceptor limits the calls this client makes: a refused
// call fails locally with the same codes.ResourceExhausted status (and
// details) a server would send, and is never sent. Its Key must not need a
// peer (use Method, Constant or a KeyFunc of your own).
func (l *Limiter) UnaryClientInterceptor() grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if v := l.decide(ctx, method); !v.pass {
			return v.err
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	}
}

// StreamClientInterceptor limits the streams this client opens, as
// UnaryClientInterceptor limits calls.
func (l *Limiter) StreamClientInterceptor() grpc.StreamClientInterceptor {
	return func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		if v := l.decide(ctx, method); !v.pass {
			return nil, v.err
		}
		return streamer(ctx, desc, cc, method, opts...)
	}
}

// metadata renders the verdict's rate-limit fields.
func (v *verdict) metadata() metadata.MD {
	ru := v.ru
	r := int64(0)
	if v.d.Allowed {
		r = int64(max(v.d.Remaining, 0))
	}
	var buf [96]byte
	b := append(buf[:0], ru.rlPrefix...)
	b = strconv.AppendInt(b, r, 10)
	if v.t >= 0 {
		b = append(b, ";t="...)
		b = strconv.AppendInt(b, v.t, 10)
	}
	// policyVals is shared by every call of the rule: grpc-go copies
	// header values into its own lists (metadata.Join), never into ours.
	md := metadata.MD{MDPolicy: ru.policyVals, MDRateLimit: {string(b)}}
	if !v.d.Allowed && v.d.Admissible() {
		md[MDRetryAfter] = []string{strconv.FormatInt(retryAfterSeconds(v.d.RetryAfter), 10)}
	}
	return md
}

// retryAfterSeconds is the Retry-After value: the wait rounded up, at least
// 1, so a client honouring it is never refused for retrying too early and
// never t (rounded down) earlier.
func retryAfterSeconds(d time.Duration) int64 { return max(ceilSeconds(d), 1) }

// retryDelay is RetryInfo's retry_delay: the backend's wait (exact for
// SlidingLog) plus engine.ClockRefresh, rounded up to the millisecond, or
// 1 s where the backend gave none (a failure policy's refusal), so that a
// client honouring it does not retry in a tight loop.
//
// Why the margin: the in-memory engine's default clock is a cached reading
// that lags the true time by up to ClockRefresh (plus the refresh
// goroutine's scheduling delay under a saturated scheduler). A wait
// computed on a fresh reading and a retry judged on a stale one would
// refuse a client that waited exactly the wait. Over the network (Redis's
// clock, a remote client) the round trip adds to the client's wait anyway.
func retryDelay(d time.Duration) time.Duration {
	if d <= 0 {
		return time.Second
	}
	if d > math.MaxInt64-engine.ClockRefresh-time.Millisecond {
		return d / time.Millisecond * time.Millisecond // no overflow near engine.Never
	}
	d += engine.ClockRefresh
	return (d + time.Millisecond - 1) / time.Millisecond * time.Millisecond
}

// deniedStatus is the refusal of a call: codes.ResourceExhausted with a
// google.rpc.RetryInfo (when to retry) and a google.rpc.QuotaFailure (which
// quota: the rule's name as subject and quota id). The QuotaFailure is
// marshalled once per rule at New (status.FromProto copies it into each
// status, so the rule's copy is never shared with a caller); a refusal
// marshals only its RetryInfo, so that a flood of refused calls costs
// little more than admitted ones.
func deniedStatus(ru *rule, d engine.Decision) error {
	wait := retryDelay(d.RetryAfter)
	ri, err := anypb.New(&errdetails.RetryInfo{RetryDelay: durationpb.New(wait)})
	details := []*anypb.Any{ri, ru.quotaAny}
	if err != nil || ru.quotaAny == nil {
		// Marshalling well-formed messages does not fail; if it ever did,
		// the code and message still say what happened.
		details = nil
	}
	return status.FromProto(&spb.Status{
		Code:    int32(codes.ResourceExhausted),
		Message: ru.denyMsg + wait.String(),
		Details: details,
	}).Err()
}

// neverStatus refuses a call its backend can never admit (RetryAfter
// engine.Never: its cost is above the backend's limit):
// codes.FailedPrecondition, which clients do not retry as they retry
// ResourceExhausted, with the rule's QuotaFailure and no RetryInfo.
func neverStatus(ru *rule, d engine.Decision) error {
	var details []*anypb.Any
	if ru.quotaAny != nil {
		details = []*anypb.Any{ru.quotaAny}
	}
	return status.FromProto(&spb.Status{
		Code:    int32(codes.FailedPrecondition),
		Message: fmt.Sprintf("rate limit %q: a call costing %d can never be admitted (the backend holds at most %d)", ru.name, ru.cost, d.Limit),
		Details: details,
	}).Err()
}

// quotaFailure is a rule's QuotaFailure detail, marshalled.
func quotaFailure(ru *rule) *anypb.Any {
	a, err := anypb.New(&errdetails.QuotaFailure{Violations: []*errdetails.QuotaFailure_Violation{{
		Subject:     "rule:" + ru.name,
		Description: fmt.Sprintf("at most %d calls per %s", ru.limit, ru.window),
		QuotaId:     ru.name,
		QuotaValue:  int64(ru.limit),
	}}})
	if err != nil {
		return nil
	}
	return a
}

func keyErrorStatus(err error) error {
	return status.Error(codes.InvalidArgument, "rate-limit key: "+err.Error())
}

func unavailableStatus(name string) error {
	return status.Errorf(codes.Unavailable, "rate limit %q: backend unavailable", name)
}

// contextStatus is the status of a call whose context ended while its
// backend decided: codes.Canceled or codes.DeadlineExceeded.
func contextStatus(err error) error {
	return status.FromContextError(err).Err()
}
