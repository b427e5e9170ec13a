package httplimit

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/slidelimit/slidelimit/engine"
)

// The five rate-limit headers, in the order of limitWriter.vals.
var ourHeaders = [5]string{hdrPolicy, hdrRateLimit, hdrXLimit, hdrXRemaining, hdrXReset}

// setHeaders formats the five rate-limit headers for the applied rules and
// returns the writer the handler gets: a limitWriter that enforces the
// Upstream policy when the handler commits its response. It writes them
// into h now, except under UpstreamOurs, where the limitWriter writes
// them at commit (once: the handler's values would be replaced then
// anyway); a caller that answers the request itself calls restore.
// expose says the request had an Origin, so the response must keep our
// Access-Control-Expose-Headers value.
//
// RateLimit-Policy and RateLimit list every applied rule in rule order
// (draft-11 fields are structured-field lists), RateLimit leaving out the
// rules whose remaining is unknown (Rule.RemainingUnknown, admitted);
// X-RateLimit-* describe the most restrictive rule whose remaining is
// known (least remaining, then the longest reset), since those legacy
// headers hold one value each. A header with nothing to say is left out.
//
// Cost with one rule: two allocations, one string holding every
// per-request value (sliced into the values) and the limitWriter, whose
// array backs the five header value lists. Each list is a capacity-limited
// slice of it, so a later Header.Add on one copies instead of overwriting
// its neighbour.
func setHeaders(h http.Header, w http.ResponseWriter, as []applied, up UpstreamHeaders, expose bool) *limitWriter {
	var buf [256]byte
	b := buf[:0]
	// RateLimit-Policy: precomputed for one rule, built for several.
	policyEnd := 0
	if len(as) > 1 {
		for i := range as {
			if i > 0 {
				b = append(b, ", "...)
			}
			b = append(b, as[i].pol.item...)
		}
		policyEnd = len(b)
	}
	most := -1
	for i := range as {
		a := &as[i]
		if a.reset < 0 {
			continue // remaining unknown
		}
		if most >= 0 {
			b = append(b, ", "...)
			r, mr := remaining(&a.d), remaining(&as[most].d)
			if r < mr || r == mr && a.reset > as[most].reset {
				most = i
			}
		} else {
			most = i
		}
		b = append(b, a.ru.rlPrefix...)
		b = strconv.AppendInt(b, remaining(&a.d), 10)
		if a.t >= 0 {
			b = append(b, ";t="...)
			b = strconv.AppendInt(b, a.t, 10)
		}
	}
	endRL, endRem := len(b), len(b)
	limitStr := as[0].pol.limitStr
	if most >= 0 {
		b = strconv.AppendInt(b, remaining(&as[most].d), 10)
		endRem = len(b)
		b = strconv.AppendInt(b, as[most].reset, 10)
		limitStr = as[most].pol.limitStr
	}
	s := string(b)

	lw := &limitWriter{ResponseWriter: w, h: h, upstream: up, expose: expose}
	if len(as) > 1 {
		lw.vals[0] = s[:policyEnd]
	} else {
		lw.vals[0] = as[0].pol.item
	}
	lw.vals[1] = s[policyEnd:endRL]
	lw.vals[2] = limitStr
	lw.vals[3] = s[endRL:endRem]
	lw.vals[4] = s[endRem:]
	if up != UpstreamOurs {
		lw.restore()
	}
	// UpstreamOurs writes them once, at commit: whatever the handler did
	// to them in between is overwritten then anyway.
	return lw
}

// remaining is the r a decision advertises: what is left, 0 when refused.
func remaining(d *engine.Decision) int64 {
	if !d.Allowed {
		return 0
	}
	return int64(max(d.Remaining, 0))
}

// limitWriter is the ResponseWriter the wrapped handler gets on a decided
// request. When the handler commits its header (WriteHeader, the first
// Write or Flush) it applies the Upstream policy to whatever the handler
// set, added or removed. It passes Flush, Hijack and ReadFrom through and
// unwraps for http.ResponseController, so streaming, websockets and
// sendfile keep working behind it.
//
// Whatever the policy, rate-limit headers never go into a trailer section
// (draft-11: RateLimit and RateLimit-Policy MUST NOT; an upstream's
// X-RateLimit-Limit trailer would contradict our header): settle drops
// them from the Trailer announcement and finish drops the ones a handler
// adds after the header as http.TrailerPrefix keys.
type limitWriter struct {
	http.ResponseWriter
	h        http.Header
	vals     [5]string // "" leaves the header out
	upstream UpstreamHeaders
	expose   bool // the request had an Origin: keep exposeValue
	done     bool // header committed: the policy was applied for good
	keys     int  // len(h) at commit: more at the end means trailers were added
}

// restore sets our five header lists, each a capacity-limited view of vals,
// and removes those we have no value for.
func (w *limitWriter) restore() {
	for i, k := range ourHeaders {
		if w.vals[i] == "" {
			delete(w.h, k)
			continue
		}
		w.h[k] = w.vals[i : i+1 : i+1]
	}
}

// settle applies the Upstream policy to the header about to be sent.
//
// A header the handler left empty gets ours back, under either policy:
// httputil.ReverseProxy clears the whole header map after relaying a 1xx
// response (103 Early Hints), and the final response must still carry
// our headers (and Access-Control-Expose-Headers).
func (w *limitWriter) settle() {
	if w.upstream == UpstreamOurs {
		dropForeignRateLimit(w.h)
		w.restore()
	} else {
		for i, k := range ourHeaders {
			v := w.h[k]
			if len(v) == 1 && v[0] == w.vals[i] {
				continue // untouched (or set to our very value)
			}
			if len(v) == 0 {
				if w.vals[i] != "" {
					w.h[k] = w.vals[i : i+1 : i+1]
				}
				continue
			}
			// Theirs wins: drop our value from the list the handler set or
			// added to.
			out := make([]string, 0, len(v))
			for _, x := range v {
				if x != w.vals[i] {
					out = append(out, x)
				}
			}
			if len(out) == 0 {
				out = v[:1] // it set our very value, more than once
			}
			w.h[k] = out
		}
	}
	if w.expose && !slices.Contains(w.h[hdrExpose], exposeValue) {
		w.h[hdrExpose] = append(w.h[hdrExpose], exposeValue)
	}
	if tr := w.h[hdrTrailer]; len(tr) > 0 {
		w.h[hdrTrailer] = trailerWithoutRateLimit(tr)
		if len(w.h[hdrTrailer]) == 0 {
			delete(w.h, hdrTrailer)
		}
	}
}

func (w *limitWriter) commit() {
	if !w.done {
		w.done = true
		w.settle()
		w.keys = len(w.h)
	}
}

// finish runs when the handler has returned, before the server sends
// the trailers: it drops rate-limit trailers added as TrailerPrefix keys
// (httputil.ReverseProxy does so for trailers the upstream did not
// announce, or announced and had removed by settle).
func (w *limitWriter) finish() {
	if !w.done || len(w.h) == w.keys {
		return
	}
	for k := range w.h {
		if name, ok := strings.CutPrefix(k, http.TrailerPrefix); ok && isRateLimitName(name) {
			delete(w.h, k)
		}
	}
}

func (w *limitWriter) WriteHeader(code int) {
	// A 1xx other than 101 is informational: the final response follows
	// and the header is not committed yet.
	if !w.done && (code >= 200 || code == http.StatusSwitchingProtocols) {
		w.commit()
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *limitWriter) Write(p []byte) (int, error) {
	w.commit()
	return w.ResponseWriter.Write(p)
}

// Unwrap is for http.ResponseController.
func (w *limitWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Flush implements http.Flusher for handlers that type-assert it.
func (w *limitWriter) Flush() {
	w.commit()
	_ = http.NewResponseController(w.ResponseWriter).Flush()
}

// Hijack implements http.Hijacker (websocket upgrades); it fails with
// http.ErrNotSupported when the underlying writer cannot hijack.
func (w *limitWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	w.commit()
	return http.NewResponseController(w.ResponseWriter).Hijack()
}

// ReadFrom keeps the server's sendfile path (io.Copy to the writer).
func (w *limitWriter) ReadFrom(src io.Reader) (int64, error) {
	w.commit()
	if rf, ok := w.ResponseWriter.(io.ReaderFrom); ok {
		return rf.ReadFrom(src)
	}
	return io.Copy(writerOnly{w.ResponseWriter}, src)
}

// writerOnly hides ReadFrom so io.Copy does not recurse into it.
type writerOnly struct{ io.Writer }

// StripRateLimitHeaders deletes every rate-limit header from h: RateLimit,
// RateLimit-Policy, the older drafts' RateLimit-Limit, -Remaining and
// -Reset, and every X-RateLimit-* and X-Rate-Limit-* (X-RateLimit-Used,
// X-RateLimit-Reset-After, ...). A proxy can call it on the upstream's
// response header (httputil.ReverseProxy.ModifyResponse) to keep the
// upstream's values from ever reaching the middleware's writer.
func StripRateLimitHeaders(h http.Header) {
	for k := range h {
		if isRateLimitName(k) {
			delete(h, k)
		}
	}
}

// isRateLimitName reports whether a header name (any case) is one of the
// rate-limit family: RateLimit*, X-RateLimit-* or X-Rate-Limit-*.
func isRateLimitName(k string) bool {
	return hasPrefixFold(k, "ratelimit") || hasPrefixFold(k, "x-ratelimit-") || hasPrefixFold(k, "x-rate-limit-")
}

func hasPrefixFold(s, prefix string) bool {
	return len(s) >= len(prefix) && strings.EqualFold(s[:len(prefix)], prefix)
}

// dropForeignRateLimit deletes the rate-limit headers in h other than our
// five (which restore sets next), so that under UpstreamOurs an
// upstream's X-RateLimit-Used or RateLimit-Remaining never goes out beside
// ours. Most names in a response start with neither R nor X; the check
// costs a byte compare for them.
func dropForeignRateLimit(h http.Header) {
	for k := range h {
		if k == "" || (k[0]|0x20 != 'r' && k[0]|0x20 != 'x') || !isRateLimitName(k) {
			continue
		}
		switch k {
		case hdrPolicy, hdrRateLimit, hdrXLimit, hdrXRemaining, hdrXReset:
			continue
		}
		delete(h, k)
	}
}

// trailerWithoutRateLimit removes rate-limit names from Trailer header
// values ("X-RateLimit-Limit, Foo" -> "Foo").
func trailerWithoutRateLimit(vals []string) []string {
	var out []string
	for _, v := range vals {
		var keep []string
		for _, name := range strings.Split(v, ",") {
			if name = strings.TrimSpace(name); name != "" && !isRateLimitName(name) {
				keep = append(keep, name)
			}
		}
		if len(keep) > 0 {
			out = append(out, strings.Join(keep, ", "))
		}
	}
	return out
}
