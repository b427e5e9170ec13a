package frameworks_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/go-chi/chi/v5"
	"github.com/labstack/echo/v4"
	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/examples/frameworks"
	"github.com/slidelimit/slidelimit/httplimit"
)

func init() { gin.SetMode(gin.ReleaseMode) }

// fixedClock keeps the headers stable; production code leaves
// engine.Config.Clock nil.
type fixedClock struct{}

func (fixedClock) Now() int64 { return int64(time.Hour) }

// newMiddleware limits every request to 2 a minute per client IP.
func newMiddleware(tb testing.TB) *httplimit.Middleware {
	m, err := httplimit.New(httplimit.Options{Default: &httplimit.Rule{
		Name:   "api",
		Engine: engine.Config{Algorithm: engine.SlidingLog, Limit: 2, Window: time.Minute, Clock: fixedClock{}},
	}})
	if err != nil {
		tb.Fatal(err)
	}
	if t, ok := tb.(*testing.T); ok {
		t.Cleanup(func() { m.Close() })
	}
	return m
}

type response struct {
	code                             int
	policy, rateLimit, retry, xLimit string
	body                             string
}

func get(h http.Handler, path string) response {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
	// Result's header is the snapshot taken when the status was written:
	// what a client gets. rec.Header() is the live map, which a writer
	// can still change after the response went out.
	hdr := rec.Result().Header
	return response{rec.Code, hdr.Get("RateLimit-Policy"), hdr.Get("RateLimit"),
		hdr.Get("Retry-After"), hdr.Get("X-RateLimit-Limit"), rec.Body.String()}
}

// Each handler style of each framework: two admitted responses with their
// RateLimit headers, then a 429 with Retry-After, and the handler's own
// X-RateLimit-Limit replaced by the middleware's.
func TestHeadersSurviveEachFrameworksWriter(t *testing.T) {
	type build func(m *httplimit.Middleware) http.Handler
	cases := map[string]build{
		"chi": func(m *httplimit.Middleware) http.Handler {
			r := chi.NewRouter()
			r.Use(m.Handler)
			r.Get("/x", func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("X-RateLimit-Limit", "999") // an upstream's own
				w.WriteHeader(http.StatusCreated)
				fmt.Fprint(w, "ok")
			})
			return r
		},
		"gin/String": func(m *httplimit.Middleware) http.Handler {
			r := gin.New()
			r.Use(frameworks.Gin(m))
			r.GET("/x", func(c *gin.Context) { c.Header("X-RateLimit-Limit", "999"); c.String(http.StatusCreated, "ok") })
			return r
		},
		"gin/JSON": func(m *httplimit.Middleware) http.Handler {
			r := gin.New()
			r.Use(frameworks.Gin(m))
			r.GET("/x", func(c *gin.Context) { c.Header("X-RateLimit-Limit", "999"); c.JSON(http.StatusCreated, "ok") })
			return r
		},
		"gin/Status": func(m *httplimit.Middleware) http.Handler {
			r := gin.New()
			r.Use(frameworks.Gin(m))
			r.GET("/x", func(c *gin.Context) { c.Header("X-RateLimit-Limit", "999"); c.Status(http.StatusCreated) })
			return r
		},
		"gin/Writer": func(m *httplimit.Middleware) http.Handler {
			r := gin.New()
			r.Use(frameworks.Gin(m))
			r.GET("/x", func(c *gin.Context) {
				c.Writer.Header().Set("X-RateLimit-Limit", "999")
				c.Writer.WriteHeader(http.StatusCreated)
				c.Writer.WriteString("ok")
			})
			return r
		},
		"echo/String": func(m *httplimit.Middleware) http.Handler {
			e := echo.New()
			e.Use(frameworks.Echo(m))
			e.GET("/x", func(c echo.Context) error {
				c.Response().Header().Set("X-RateLimit-Limit", "999")
				return c.String(http.StatusCreated, "ok")
			})
			return e
		},
		"echo/JSON": func(m *httplimit.Middleware) http.Handler {
			e := echo.New()
			e.Use(frameworks.Echo(m))
			e.GET("/x", func(c echo.Context) error {
				c.Response().Header().Set("X-RateLimit-Limit", "999")
				return c.JSON(http.StatusCreated, "ok")
			})
			return e
		},
		"echo/NoContent": func(m *httplimit.Middleware) http.Handler {
			e := echo.New()
			e.Use(frameworks.Echo(m))
			e.GET("/x", func(c echo.Context) error {
				c.Response().Header().Set("X-RateLimit-Limit", "999")
				return c.NoContent(http.StatusCreated)
			})
			return e
		},
	}
	for name, b := range cases {
		t.Run(name, func(t *testing.T) {
			h := b(newMiddleware(t))
			want := []response{
				{code: 201, policy: `"api";q=2;w=60`, rateLimit: `"api";r=1`, xLimit: "2"},
				{code: 201, policy: `"api";q=2;w=60`, rateLimit: `"api";r=0;t=60`, xLimit: "2"},
				{code: 429, policy: `"api";q=2;w=60`, rateLimit: `"api";r=0;t=60`, retry: "61", xLimit: "2"},
			}
			for i, w := range want {
				got := get(h, "/x")
				got.body = ""
				if got != w {
					t.Errorf("request %d: %+v, want %+v", i+1, got, w)
				}
			}
		})
	}
}

// The refusal reaches the framework's own bookkeeping: gin's writer
// and echo's Response record the 429, so their loggers see it.
func TestRefusalStatusIsSeenByTheFramework(t *testing.T) {
	m := newMiddleware(t)
	var ginStatus []int
	r := gin.New()
	r.Use(func(c *gin.Context) { c.Next(); ginStatus = append(ginStatus, c.Writer.Status()) })
	r.Use(frameworks.Gin(m))
	r.GET("/x", func(c *gin.Context) { c.String(http.StatusOK, "ok") })
	for range 3 {
		get(r, "/x")
	}
	if fmt.Sprint(ginStatus) != "[200 200 429]" {
		t.Errorf("gin saw %v, want [200 200 429]", ginStatus)
	}

	m2 := newMiddleware(t)
	var echoStatus []int
	e := echo.New()
	e.Use(func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			err := next(c)
			echoStatus = append(echoStatus, c.Response().Status)
			return err
		}
	})
	e.Use(frameworks.Echo(m2))
	e.GET("/x", func(c echo.Context) error { return c.String(http.StatusOK, "ok") })
	for range 3 {
		get(e, "/x")
	}
	if fmt.Sprint(echoStatus) != "[200 200 429]" {
		t.Errorf("echo saw %v, want [200 200 429]", echoStatus)
	}
}
