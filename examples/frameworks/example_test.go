package frameworks_test

import (
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/go-chi/chi/v5"
	"github.com/labstack/echo/v4"
	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/examples/frameworks"
	"github.com/slidelimit/slidelimit/httplimit"
)

// limiter allows 1 request a minute per client IP.
func limiter() *httplimit.Middleware {
	m, err := httplimit.New(httplimit.Options{Default: &httplimit.Rule{
		Name:   "api",
		Engine: engine.Config{Algorithm: engine.SlidingLog, Limit: 1, Window: time.Minute, Clock: fixedClock{}},
	}})
	if err != nil {
		log.Fatal(err)
	}
	return m
}

func show(h http.Handler) {
	for range 2 {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "/hello", nil))
		hdr := rec.Result().Header // as sent: the snapshot taken when the status was written
		fmt.Printf("%d %s Retry-After=%q\n", rec.Code, hdr.Get("RateLimit"), hdr.Get("Retry-After"))
	}
}

// chi takes the middleware as it is.
func Example_chi() {
	m := limiter()
	defer m.Close()
	r := chi.NewRouter()
	r.Use(m.Handler)
	r.Get("/hello", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "hello") })
	show(r)
	// Output:
	// 200 "api";r=0;t=60 Retry-After=""
	// 429 "api";r=0;t=60 Retry-After="61"
}

// gin needs the adapter, so that the headers go out on admitted responses.
func Example_gin() {
	m := limiter()
	defer m.Close()
	gin.SetMode(gin.ReleaseMode)
	r := gin.New()
	r.Use(frameworks.Gin(m))
	r.GET("/hello", func(c *gin.Context) { c.String(http.StatusOK, "hello") })
	show(r)
	// Output:
	// 200 "api";r=0;t=60 Retry-After=""
	// 429 "api";r=0;t=60 Retry-After="61"
}

// echo needs the adapter too.
func Example_echo() {
	m := limiter()
	defer m.Close()
	e := echo.New()
	e.Use(frameworks.Echo(m))
	e.GET("/hello", func(c echo.Context) error { return c.String(http.StatusOK, "hello") })
	show(e)
	// Output:
	// 200 "api";r=0;t=60 Retry-After=""
	// 429 "api";r=0;t=60 Retry-After="61"
}
