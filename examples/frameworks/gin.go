package frameworks

import (
	"net/http"

	"github.com/gin-gonic/gin"
	"github.com/slidelimit/slidelimit/httplimit"
)

// Gin adapts m to a gin middleware. Requests m refuses are answered by m
// (429 with Retry-After and the rate-limit headers) and the chain is
// aborted; admitted ones go on with c.Writer writing through m's writer, so
// the headers reach the client whichever gin call writes the response.
func Gin(m *httplimit.Middleware) gin.HandlerFunc {
	return func(c *gin.Context) {
		orig := c.Writer
		passed := false
		m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			passed = true
			c.Request = r
			c.Writer = &ginWriter{ResponseWriter: orig, lw: w}
			c.Next()
		})).ServeHTTP(orig, c.Request)
		c.Writer = orig
		if !passed {
			c.Abort()
		}
	}
}

// ginWriter is gin's writer with the writes going through the middleware's
// writer lw (which wraps gin's own: lw commits our headers, then hands the
// call down). Status, Size, Written, Hijack and the rest stay gin's.
type ginWriter struct {
	gin.ResponseWriter
	lw http.ResponseWriter
}

func (g *ginWriter) WriteHeader(code int)              { g.lw.WriteHeader(code) }
func (g *ginWriter) Write(b []byte) (int, error)       { return g.lw.Write(b) }
func (g *ginWriter) WriteString(s string) (int, error) { return g.lw.Write([]byte(s)) }
func (g *ginWriter) Flush()                            { _ = http.NewResponseController(g.lw).Flush() }
func (g *ginWriter) Unwrap() http.ResponseWriter       { return g.lw }

// WriteHeaderNow is what gin calls to send the status line before a body
// (c.Render, c.AbortWithStatus): commit our headers first, by the status
// gin recorded, then let gin write.
func (g *ginWriter) WriteHeaderNow() {
	if !g.Written() {
		g.lw.WriteHeader(g.Status())
	}
	g.ResponseWriter.WriteHeaderNow()
}
