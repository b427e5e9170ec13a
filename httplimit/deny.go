package httplimit

import (
	"net/http"
	"strconv"
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
	retry := strconv.FormatInt(d.retrySeconds(), 10)
	// Rule names are [A-Za-z0-9_.-] (New checks), so they need no JSON
	// escaping.
	body := `{"type":"` + ProblemTypeQuotaExceeded +
		`","title":"Too Many Requests","status":429,"detail":"quota of policy \"` + d.Rule +
		`\" exceeded; retry in ` + retry + ` s","violated-policies":["` + d.Rule + "\"]}\n"
	h := w.Header()
	h.Set("Content-Type", "application/problem+json")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusTooManyRequests)
	_, _ = w.Write([]byte(body))
}

// DenyText answers 429 with a short text/plain body (the behaviour before
// DenyProblem became the default).
func DenyText(w http.ResponseWriter, _ *http.Request, _ Denial) {
	h := w.Header()
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusTooManyRequests)
	_, _ = w.Write([]byte("429 too many requests\n"))
}

// retrySeconds is the wait in whole seconds that Retry-After announces:
// RetryAfter when the middleware set it, else the refusing decision's.
func (d *Denial) retrySeconds() int64 {
	if d.RetryAfter > 0 {
		return ceilSeconds(d.RetryAfter)
	}
	return max(ceilSeconds(d.Decision.RetryAfter), 1)
}
