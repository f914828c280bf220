package main

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/consumergroup-operator/consumergroup-operator/internal/rocketmqstandin"
)

// TestNameServerControl drives the demo's control endpoint as the printed curl command does: a topic
// grows, a bad count is refused with a sentence that says what to send and leaves the route as it was,
// and an unknown topic is a 404.
func TestNameServerControl(t *testing.T) {
	nsrv := rocketmqstandin.Start(t)
	setQueues(nsrv, "orders", 6)
	control := nameServerControl(nsrv)
	for _, c := range []struct {
		name, method, target string
		wantStatus           int
		wantBody             string
		wantQueues           int32
	}{
		{"show", http.MethodGet, "/topics/orders", http.StatusOK, `{"topic":"orders","brokers":[{"name":"broker-a","queues":6},{"name":"broker-b","queues":6}]}`, 6},
		{"grow", http.MethodPut, "/topics/orders?queues=8", http.StatusOK, `{"topic":"orders","brokers":[{"name":"broker-a","queues":8},{"name":"broker-b","queues":8}]}`, 8},
		{"no count", http.MethodPut, "/topics/orders", http.StatusBadRequest, "?queues=N", 8},
		{"zero", http.MethodPut, "/topics/orders?queues=0", http.StatusBadRequest, "from 1 to 64", 8},
		{"too many", http.MethodPut, "/topics/orders?queues=65", http.StatusBadRequest, "from 1 to 64", 8},
		{"not a number", http.MethodPut, "/topics/orders?queues=8x", http.StatusBadRequest, "from 1 to 64", 8},
		{"unknown topic", http.MethodGet, "/topics/payments", http.StatusNotFound, `does not know the topic "payments"`, 8},
		{"shrink", http.MethodPut, "/topics/orders?queues=2", http.StatusOK, `"queues":2`, 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			control.ServeHTTP(rec, httptest.NewRequest(c.method, c.target, nil))
			if rec.Code != c.wantStatus || !strings.Contains(rec.Body.String(), c.wantBody) {
				t.Errorf("%s %s: %d %q; want %d and %q", c.method, c.target, rec.Code, rec.Body.String(), c.wantStatus, c.wantBody)
			}
			brokers, _ := nsrv.Topic("orders")
			for _, b := range brokers {
				if b.Queues != c.wantQueues {
					t.Errorf("after %s %s the stand-in serves %s with %d queues, want %d", c.method, c.target, b.Name, b.Queues, c.wantQueues)
				}
			}
		})
	}
}
