package httplimit

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"
)

func TestDenyBodyIsProblemJSON(t *testing.T) {
	m := mustNew(t, Options{Default: &Rule{Name: "api.v1", Engine: logConfig(1, time.Minute, newClock())}})
	h := m.Handler(okHandler)
	serveRec(h, "GET", "/", "", nil)
	rec := serveRec(h, "GET", "/", "", nil)
	if rec.Code != 429 || rec.Header().Get("Content-Type") != "application/problem+json" {
		t.Fatalf("%d %q", rec.Code, rec.Header().Get("Content-Type"))
	}
	var p struct {
		Type     string   `json:"type"`
		Title    string   `json:"title"`
		Status   int      `json:"status"`
		Detail   string   `json:"detail"`
		Policies []string `json:"violated-policies"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &p); err != nil {
		t.Fatalf("body %s: %v", rec.Body, err)
	}
	if p.Type != ProblemTypeQuotaExceeded || p.Status != 429 || len(p.Policies) != 1 || p.Policies[0] != "api.v1" || !strings.Contains(p.Detail, "61 s") {
		t.Errorf("problem %+v", p)
	}
	// text/plain stays available.
	m2 := mustNew(t, Options{OnDeny: DenyText, Default: &Rule{Name: "d", Engine: logConfig(1, time.Minute, newClock())}})
	h2 := m2.Handler(okHandler)
	serveRec(h2, "GET", "/", "", nil)
	rec = serveRec(h2, "GET", "/", "", nil)
	if rec.Header().Get("Content-Type") != "text/plain; charset=utf-8" || rec.Body.String() != "429 too many requests\n" {
		t.Errorf("DenyText: %q %q", rec.Header().Get("Content-Type"), rec.Body)
	}
}

func TestCORSExposesRateLimitHeaders(t *testing.T) {
	m := mustNew(t, Options{Default: &Rule{Name: "d", Engine: logConfig(1, time.Minute, newClock())}})
	h := m.Handler(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Add("Access-Control-Expose-Headers", "X-Trace")
	}))
	origin := map[string]string{"Origin": "https://app.example"}
	for i, want := range []int{200, 429} {
		rec := serveRec(h, "GET", "/", "", origin)
		got := strings.Join(rec.Header().Values("Access-Control-Expose-Headers"), ", ")
		if rec.Code != want || !strings.Contains(got, "RateLimit, RateLimit-Policy, Retry-After, X-RateLimit-Limit") {
			t.Errorf("request %d: %d Expose %q", i, rec.Code, got)
		}
		if i == 0 && !strings.Contains(got, "X-Trace") {
			t.Errorf("handler's own expose list lost: %q", got)
		}
	}
	m2 := mustNew(t, Options{Default: &Rule{Name: "d", Engine: logConfig(1, time.Minute, newClock())}})
	if rec := serveRec(m2.Handler(okHandler), "GET", "/", "", nil); rec.Header().Get("Access-Control-Expose-Headers") != "" {
		t.Error("Expose-Headers without Origin")
	}
}
