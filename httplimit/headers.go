package httplimit

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strconv"

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
//
// RateLimit-Policy and RateLimit list every applied rule in rule order
// (draft-11 fields are structured-field lists); X-RateLimit-* describe the
// most restrictive one (least remaining, then the longest t), since those
// legacy headers hold one value each.
//
// Cost with one rule: two allocations, one string holding every
// per-request value (sliced into the values) and the limitWriter, whose
// array backs the five header value lists. Each list is a capacity-limited
// slice of it, so a later Header.Add on one copies instead of overwriting
// its neighbour.
func setHeaders(h http.Header, w http.ResponseWriter, as []applied, up UpstreamHeaders) *limitWriter {
	var buf [256]byte
	b := buf[:0]
	// RateLimit-Policy: precomputed for one rule, built for several.
	policyEnd := 0
	if len(as) > 1 {
		for i := range as {
			if i > 0 {
				b = append(b, ", "...)
			}
			b = append(b, as[i].ru.policy...)
		}
		policyEnd = len(b)
	}
	most := 0
	for i := range as {
		a := &as[i]
		if i > 0 {
			b = append(b, ", "...)
			r, mr := remaining(&a.d), remaining(&as[most].d)
			if r < mr || r == mr && a.t > as[most].t {
				most = i
			}
		}
		b = append(b, a.ru.rlPrefix...)
		b = strconv.AppendInt(b, remaining(&a.d), 10)
		b = append(b, ";t="...)
		b = strconv.AppendInt(b, a.t, 10)
	}
	endRL := len(b)
	b = strconv.AppendInt(b, remaining(&as[most].d), 10)
	endRem := len(b)
	b = strconv.AppendInt(b, as[most].t, 10)
	s := string(b)

	lw := &limitWriter{ResponseWriter: w, h: h, upstream: up}
	if len(as) > 1 {
		lw.vals[0] = s[:policyEnd]
	} else {
		lw.vals[0] = as[0].ru.policy
	}
	lw.vals[1] = s[policyEnd:endRL]
	lw.vals[2] = as[most].ru.limitStr
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
// set or added to the rate-limit headers. It passes Flush, Hijack and
// ReadFrom through and unwraps for http.ResponseController, so streaming,
// websockets and sendfile keep working behind it.
type limitWriter struct {
	http.ResponseWriter
	h        http.Header
	vals     [5]string
	upstream UpstreamHeaders
	done     bool // header committed: the policy was applied for good
}

// restore sets our five header lists, each a capacity-limited view of vals.
func (w *limitWriter) restore() {
	for i, k := range ourHeaders {
		w.h[k] = w.vals[i : i+1 : i+1]
	}
}

// settle applies the Upstream policy to the header about to be sent.
func (w *limitWriter) settle() {
	if w.upstream == UpstreamOurs {
		w.restore()
		return
	}
	for i, k := range ourHeaders {
		v := w.h[k]
		if len(v) == 1 && v[0] == w.vals[i] {
			continue // untouched (or set to our very value)
		}
		if len(v) == 0 {
			continue // the handler deleted it: leave it deleted
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

func (w *limitWriter) commit() {
	if !w.done {
		w.done = true
		w.settle()
	}
}

func (w *limitWriter) WriteHeader(code int) {
	if !w.done {
		if code >= 200 {
			w.commit()
		} else {
			w.settle() // 1xx: sent with the header as it stands now
		}
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

// StripRateLimitHeaders deletes RateLimit, RateLimit-Policy and
// X-RateLimit-* from h. A proxy can call it on the upstream's response
// header (httputil.ReverseProxy.ModifyResponse) to keep the upstream's
// values from ever reaching the middleware's writer.
func StripRateLimitHeaders(h http.Header) {
	for _, k := range ourHeaders {
		delete(h, k)
	}
}
