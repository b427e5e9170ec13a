package engine

import (
	"reflect"
	"testing"
)

// TestDecisionPathResultsFitInRegisters checks that what the algorithms'
// take and peek return (every AllowN and Peek passes it up through
// several calls) is made of values the compiler keeps in registers: no
// struct of more than four fields or 32 bytes, which it would copy through
// memory at every return (see verdict).
func TestDecisionPathResultsFitInRegisters(t *testing.T) {
	it := reflect.TypeFor[algo]()
	for _, name := range []string{"take", "peek"} {
		m, ok := it.MethodByName(name)
		if !ok {
			t.Fatalf("algo has no method %s", name)
		}
		for i := range m.Type.NumOut() {
			out := m.Type.Out(i)
			if out.Kind() == reflect.Struct && (out.NumField() > 4 || out.Size() > 32) {
				t.Errorf("algo.%s returns %v: %d fields in %d bytes, more than the 4 fields in 32 bytes kept in registers", name, out, out.NumField(), out.Size())
			}
		}
	}
}

// TestDecisionFromVerdictKeepsEveryField checks that the exported methods
// build their Decision from all of the algorithm's result: a denial's
// RetryAfter and ResetAfter, and Remaining, Limit and Allowed, for each
// algorithm, through AllowN, AllowNAt, AllowNWithLimit and Peek.
func TestDecisionFromVerdictKeepsEveryField(t *testing.T) {
	for _, alg := range Algorithms() {
		t.Run(alg.String(), func(t *testing.T) {
			l := newLimiter(t, Config{Algorithm: alg, Limit: 4, Window: 1e9, Clock: &fakeClock{}})
			d := l.AllowN("k", 3)
			if !d.Allowed || d.Limit != 4 || d.Remaining != 1 || d.RetryAfter != 0 || d.ResetAfter <= 0 {
				t.Fatalf("AllowN(3) on a new key = %+v", d)
			}
			d = l.AllowNAt("k", 1, l.Now())
			if !d.Allowed || d.Limit != 4 || d.Remaining != 0 || d.ResetAfter <= 0 {
				t.Fatalf("AllowNAt(1) = %+v", d)
			}
			d = l.AllowN("k", 2)
			if d.Allowed || d.Limit != 4 || d.Remaining != 0 || d.RetryAfter <= 0 || d.RetryAfter == Never || d.ResetAfter <= 0 {
				t.Fatalf("AllowN(2) on a full key = %+v", d)
			}
			p := l.Peek("k")
			if p.Allowed || p.Limit != 4 || p.RetryAfter <= 0 || p.ResetAfter <= 0 {
				t.Fatalf("Peek on a full key = %+v", p)
			}
			if d := l.AllowNWithLimit("k", 5, 4); d.Allowed || d.RetryAfter != Never || d.Limit != 4 {
				t.Fatalf("AllowNWithLimit(5, 4) = %+v, want a denial with RetryAfter Never", d)
			}
		})
	}
}
