package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	testingclock "k8s.io/utils/clock/testing"
)

// A pod on the node that sends junk tokens makes the API server review a burst of them, then as many a
// second as the agent allows; the rest are refused for now (503), not as bad tokens (401), and cost the
// API server nothing.
func TestTokenReviewsAreBounded(t *testing.T) {
	cs := fake.NewClientset()
	reviews := 0
	cs.PrependReactor("create", "tokenreviews", func(k8stesting.Action) (bool, runtime.Object, error) {
		reviews++
		return true, &authenticationv1.TokenReview{Status: authenticationv1.TokenReviewStatus{Authenticated: false}}, nil
	})
	clk := testingclock.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	r := newReviewer(Config{Node: testNode, Client: cs, Clock: clk, TokenCacheTTL: time.Minute, MaxIdentities: 8,
		ReviewsPerSecond: 1, ReviewBurst: 3})
	var refused, limited int
	for i := range 10 {
		_, err := r.identity(context.Background(), fmt.Sprintf("junk-%d", i))
		switch {
		case errors.Is(err, errTooManyReviews):
			limited++
		case isRefusal(err):
			refused++
		default:
			t.Fatalf("token %d: %v", i, err)
		}
	}
	if reviews != 3 || refused != 3 || limited != 7 {
		t.Fatalf("10 junk tokens at once: %d reviews, %d refused, %d limited; want 3, 3 and 7", reviews, refused, limited)
	}
	clk.Step(2 * time.Second)
	if _, err := r.identity(context.Background(), "junk-later"); !isRefusal(err) || reviews != 4 {
		t.Fatalf("a junk token 2 s later: %v after %d reviews; want it reviewed and refused", err, reviews)
	}
}
