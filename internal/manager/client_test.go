package manager

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// TestDefaultClientRateLimit: a client built from a config the default limit was applied to, over
// controller-runtime's own defaults (20 and 30), sends its first 200 requests at once and the rest at 100
// a second. 250 requests then take about half a second: without the limit they would take no time, with
// controller-runtime's defaults 11 s, with client-go's (5 and 10) 48 s.
func TestDefaultClientRateLimit(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"kind":"Namespace","apiVersion":"v1","metadata":{"name":"n"}}`))
	}))
	defer srv.Close()
	cfg := DefaultClientRateLimit.Apply(&rest.Config{Host: srv.URL, QPS: 20, Burst: 30})
	if cfg.QPS != 100 || cfg.Burst != 200 {
		t.Fatalf("QPS %v, burst %d, want 100 and 200", cfg.QPS, cfg.Burst)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	// A request the limit would delay past the deadline fails at once instead of waiting.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	start := time.Now()
	for i := range 250 {
		if _, err := cs.CoreV1().Namespaces().Get(ctx, "n", metav1.GetOptions{}); err != nil {
			t.Fatalf("request %d after %v: %v", i, time.Since(start), err)
		}
	}
	// The 50 requests past the burst need 0.5 s of tokens, less what refilled while the burst went out.
	if took := time.Since(start); took < 300*time.Millisecond || took > 3*time.Second {
		t.Errorf("250 requests took %v, want about 0.5 s", took)
	}
}

func TestClientRateLimitValidate(t *testing.T) {
	for _, tc := range []struct {
		l    ClientRateLimit
		fine bool
	}{
		{DefaultClientRateLimit, true},
		{ClientRateLimit{QPS: 0.5, Burst: 1}, true},
		{ClientRateLimit{QPS: 0, Burst: 200}, false},  // client-go's default of 5
		{ClientRateLimit{QPS: -1, Burst: 200}, false}, // no limit
		{ClientRateLimit{QPS: 100, Burst: 0}, false},
	} {
		if err := tc.l.Validate(); (err == nil) != tc.fine {
			t.Errorf("%+v: Validate() = %v", tc.l, err)
		}
	}
}
