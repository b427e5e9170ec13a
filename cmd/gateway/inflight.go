package main

import (
	"net/http"
	"sort"
	"sync"
	"sync/atomic"
	"time"
)

// inflight tracks the requests being served, so a shutdown that runs out
// of time can say which ones it cut. sync.Map (a concurrent hash trie
// since Go 1.24) keeps the add and remove off any shared lock.
type inflight struct {
	m sync.Map // *inflightReq -> struct{}
	n atomic.Int64
}

type inflightReq struct {
	method, path, remote string
	start                time.Time
}

// add registers r and returns the function that removes it.
func (f *inflight) add(r *http.Request) func() {
	e := &inflightReq{method: r.Method, path: r.URL.Path, remote: r.RemoteAddr, start: time.Now()}
	f.m.Store(e, struct{}{})
	f.n.Add(1)
	return func() {
		f.m.Delete(e)
		f.n.Add(-1)
	}
}

func (f *inflight) count() int64 { return f.n.Load() }

// snapshot lists the requests in flight, oldest first.
func (f *inflight) snapshot() []*inflightReq {
	var out []*inflightReq
	f.m.Range(func(k, _ any) bool {
		out = append(out, k.(*inflightReq))
		return true
	})
	sort.Slice(out, func(i, j int) bool { return out[i].start.Before(out[j].start) })
	return out
}
