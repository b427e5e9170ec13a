package httplimit_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/httplimit"
)

// A new rule goes out as a canary: enforced for 5 % of clients, decided
// and counted in shadow for the others, while the existing default keeps
// enforcing everyone. RuleStats compares the two cohorts.
func ExampleRule_enforcePercent() {
	five := 5.0
	m, err := httplimit.New(httplimit.Options{
		Key: httplimit.Header("X-Api-Key"),
		Rules: []httplimit.Rule{{
			Name: "export", PathPrefix: "/export", EnforcePercent: &five,
			Engine: engine.Config{Algorithm: engine.SlidingLog, Limit: 1, Window: time.Minute, Clock: fixedClock{}},
		}},
		Default: &httplimit.Rule{
			Name:   "default",
			Engine: engine.Config{Algorithm: engine.SlidingCounter, Limit: 100, Window: time.Minute, Clock: fixedClock{}},
		},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer m.Close()
	h := m.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	for i := range 1000 {
		for range 2 { // the second request is over the limit
			req := httptest.NewRequest("GET", "/export", nil)
			req.Header.Set("X-Api-Key", fmt.Sprintf("client-%d", i))
			h.ServeHTTP(httptest.NewRecorder(), req)
		}
	}
	s := m.RuleStats()[0]
	fmt.Printf("enforced: %+v\nshadow:   %+v\n", s.Enforced(), s.Shadow())
	// Output:
	// enforced: {Allowed:50 Refused:50}
	// shadow:   {Allowed:950 Refused:950}
}
