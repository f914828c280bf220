package testenv

import (
	"net/http"
	"sync/atomic"

	"k8s.io/client-go/rest"
)

// WriteCounter counts the requests that change something on the API server (POST, PUT, PATCH and DELETE)
// sent with the client configurations it wraps: a benchmark or test reads an operator's writes from it.
type WriteCounter struct{ writes atomic.Int64 }

// Wrap makes the requests sent with cfg count.
func (w *WriteCounter) Wrap(cfg *rest.Config) {
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return countingTransport{next: rt, counter: w} })
}

// Writes is how many have been sent so far.
func (w *WriteCounter) Writes() int64 { return w.writes.Load() }

type countingTransport struct {
	next    http.RoundTripper
	counter *WriteCounter
}

func (t countingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	switch req.Method {
	case http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete:
		t.counter.writes.Add(1)
	}
	return t.next.RoundTrip(req)
}
