package frameworks

import (
	"net/http"

	"github.com/labstack/echo/v4"
	"github.com/slidelimit/slidelimit/httplimit"
)

// Echo adapts m to an echo middleware. Requests m refuses are answered by m
// through the echo.Response (429 with Retry-After and the rate-limit
// headers; echo sees the status) and the chain stops there. Admitted ones
// go on with an echo.Response of their own around m's writer, which wraps
// the original echo.Response: every write commits m's headers first, then
// reaches the original (its Before hooks, status and size included), so the
// headers reach the client whichever echo call writes the response.
func Echo(m *httplimit.Middleware) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			res := c.Response()
			var err error
			m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				c.SetRequest(r)
				c.SetResponse(echo.NewResponse(w, c.Echo()))
				err = next(c)
			})).ServeHTTP(res, c.Request())
			c.SetResponse(res)
			return err
		}
	}
}
