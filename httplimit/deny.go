package httplimit

import (
	"net/http"
	"strconv"
	"sync"
)

// ProblemTypeQuotaExceeded is the problem type (RFC 9457) of a request
// refused for exceeding its quota, registered by the RateLimit headers
// draft.
const ProblemTypeQuotaExceeded = "https://iana.org/assignments/http-problem-types#quota-exceeded"

// DenyProblem, the default Options.OnDeny, answers 429 with an RFC 9457
// application/problem+json body of type ProblemTypeQuotaExceeded naming the
// violated policy in "violated-policies":
//
//	{"type":"https://iana.org/assignments/http-problem-types#quota-exceeded",
//	 "title":"Too Many Requests","status":429,
//	 "detail":"quota of policy \"login\" exceeded; retry in 31 s",
//	 "violated-policies":["login"]}
func DenyProblem(w http.ResponseWriter, _ *http.Request, d Denial) {
	bp := denyBodies.Get().(*[]byte)
	// Rule names are [A-Za-z0-9_.-] (New checks), so they need no JSON
	// escaping.
	b := append((*bp)[:0], problemHead...)
	b = append(b, d.Rule...)
	b = append(b, `\" exceeded; retry in `...)
	b = strconv.AppendInt(b, d.retrySeconds(), 10)
	b = append(b, ` s","violated-policies":["`...)
	b = append(b, d.Rule...)
	b = append(b, "\"]}\n"...)
	setDenyHeaders(w.Header(), "application/problem+json")
	w.WriteHeader(http.StatusTooManyRequests)
	// Write must not retain b (io.Writer's contract), so the buffer goes
	// back to the pool; one grown past a few rule names' worth is dropped.
	_, _ = w.Write(b)
	if cap(b) <= 1024 {
		*bp = b
		denyBodies.Put(bp)
	}
}

const problemHead = `{"type":"` + ProblemTypeQuotaExceeded +
	`","title":"Too Many Requests","status":429,"detail":"quota of policy \"`

// denyBodies holds the buffers refusal bodies are built in, so that a
// refusal allocates no body (a flood of refusals is when allocation costs
// most).
var denyBodies = sync.Pool{New: func() any { b := make([]byte, 0, 384); return &b }}

// setDenyHeaders sets Content-Type and X-Content-Type-Options with one
// allocation for both values (Header.Set takes one each), each value slice
// capped so that an Add by a later handler copies instead of writing into
// the other's.
func setDenyHeaders(h http.Header, contentType string) {
	v := make([]string, 2)
	v[0], v[1] = contentType, "nosniff"
	h["Content-Type"] = v[0:1:1]
	h["X-Content-Type-Options"] = v[1:2:2]
}

// DenyText answers 429 with a short text/plain body (the behaviour before
// DenyProblem became the default).
func DenyText(w http.ResponseWriter, _ *http.Request, _ Denial) {
	setDenyHeaders(w.Header(), "text/plain; charset=utf-8")
	w.WriteHeader(http.StatusTooManyRequests)
	_, _ = w.Write(textBody)
}

// textBody is DenyText's body; Write does not retain or modify it.
var textBody = []byte("429 too many requests\n")

// retrySeconds is the wait in whole seconds that Retry-After announces:
// RetryAfter when the middleware set it, else the refusing decision's.
func (d *Denial) retrySeconds() int64 {
	if d.RetryAfter > 0 {
		return ceilSeconds(d.RetryAfter)
	}
	return max(ceilSeconds(d.Decision.RetryAfter), 1)
}
