package nodeagent

import (
	"container/list"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/utils/clock"

	"github.com/consumergroup-operator/consumergroup-operator/pkg/protocol"
)

// The extra fields the API server adds to the user of a token bound to a pod (the last one from
// Kubernetes 1.30, feature ServiceAccountTokenPodNodeInfo).
const (
	extraPodName  = "authentication.kubernetes.io/pod-name"
	extraPodUID   = "authentication.kubernetes.io/pod-uid"
	extraNodeName = "authentication.kubernetes.io/node-name"
)

const serviceAccountPrefix = "system:serviceaccount:"

// identity is the pod a reviewed token is bound to.
type identity struct {
	Namespace, ServiceAccount, Pod string
	PodUID                         types.UID
	Node                           string
}

// refusal is a token the agent does not accept, with why in a sentence that never quotes the token.
type refusal struct{ reason string }

func (r refusal) Error() string { return r.reason }

func refuse(format string, args ...any) error { return refusal{reason: fmt.Sprintf(format, args...)} }

// identityOf is the pod a token's review shows it is bound to, or a refusal: the token must be
// authenticated for protocol.NodeAgentAudience, be a service account's, and be bound to a pod on node.
func identityOf(status authenticationv1.TokenReviewStatus, node string) (identity, error) {
	if !status.Authenticated {
		return identity{}, refuse("the token is not valid: the API server does not authenticate it")
	}
	if !slices.Contains(status.Audiences, protocol.NodeAgentAudience) {
		return identity{}, refuse("the token is not for audience %s", protocol.NodeAgentAudience)
	}
	ns, sa, ok := strings.Cut(strings.TrimPrefix(status.User.Username, serviceAccountPrefix), ":")
	if !strings.HasPrefix(status.User.Username, serviceAccountPrefix) || !ok || ns == "" || sa == "" {
		return identity{}, refuse("the token is not a service account's")
	}
	extra := func(key string) string {
		if v := status.User.Extra[key]; len(v) == 1 {
			return v[0]
		}
		return ""
	}
	id := identity{Namespace: ns, ServiceAccount: sa, Pod: extra(extraPodName), PodUID: types.UID(extra(extraPodUID)), Node: extra(extraNodeName)}
	switch {
	case id.Pod == "" || id.PodUID == "":
		return identity{}, refuse("the token is not bound to a pod")
	case id.Node == "":
		return identity{}, refuse("the token names no node: the pod is not scheduled, or the API server is older than Kubernetes 1.30")
	case id.Node != node:
		return identity{}, refuse("the token's pod runs on node %s, not on this agent's node %s", id.Node, node)
	}
	return id, nil
}

// errTooManyReviews refuses a request, for now, whose token would need a review beyond the agent's rate.
var errTooManyReviews = errors.New("too many tokens to review: try again later")

// reviewer reviews tokens with the API server and remembers the identities of those it accepted, by
// their SHA-256, for ttl or until the token expires, whichever comes first. Refusals are not remembered:
// a token refused now (its pod not yet known to the API server, say) may be accepted a moment later.
type reviewer struct {
	cs    kubernetes.Interface
	clock clock.PassiveClock
	node  string
	ttl   time.Duration
	max   int
	// limit bounds the reviews sent; a token already accepted needs none.
	limit flowcontrol.RateLimiter

	// mu guards the cache: byToken indexes the elements of order, which holds cached values oldest first.
	mu      sync.Mutex
	byToken map[[sha256.Size]byte]*list.Element
	order   *list.List
}

type cached struct {
	key     [sha256.Size]byte
	id      identity
	expires time.Time
}

func newReviewer(cfg Config) *reviewer {
	return &reviewer{cs: cfg.Client, clock: cfg.Clock, node: cfg.Node, ttl: cfg.TokenCacheTTL, max: cfg.MaxIdentities,
		limit:   flowcontrol.NewTokenBucketRateLimiterWithClock(cfg.ReviewsPerSecond, cfg.ReviewBurst, cfg.Clock),
		byToken: map[[sha256.Size]byte]*list.Element{}, order: list.New()}
}

// identity is the pod token is bound to. It fails with a refusal for a token the agent does not accept,
// with another error when the review itself failed.
func (r *reviewer) identity(ctx context.Context, token string) (identity, error) {
	key := sha256.Sum256([]byte(token))
	if id, ok := r.lookup(key); ok {
		return id, nil
	}
	if !r.limit.TryAccept() {
		return identity{}, errTooManyReviews
	}
	review, err := r.cs.AuthenticationV1().TokenReviews().Create(ctx, &authenticationv1.TokenReview{
		Spec: authenticationv1.TokenReviewSpec{Token: token, Audiences: []string{protocol.NodeAgentAudience}},
	}, metav1.CreateOptions{})
	if err != nil {
		return identity{}, fmt.Errorf("reviewing the token: %w", err)
	}
	id, err := identityOf(review.Status, r.node)
	if err != nil {
		return identity{}, err
	}
	r.store(key, id, cacheUntil(r.clock.Now(), r.ttl, token))
	return id, nil
}

func (r *reviewer) lookup(key [sha256.Size]byte) (identity, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e, ok := r.byToken[key]
	if !ok {
		return identity{}, false
	}
	c := e.Value.(cached)
	if !r.clock.Now().Before(c.expires) {
		r.order.Remove(e)
		delete(r.byToken, key)
		return identity{}, false
	}
	return c.id, true
}

func (r *reviewer) store(key [sha256.Size]byte, id identity, expires time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if e, ok := r.byToken[key]; ok {
		r.order.Remove(e)
	}
	for r.order.Len() >= r.max && r.order.Len() > 0 {
		oldest := r.order.Front()
		delete(r.byToken, oldest.Value.(cached).key)
		r.order.Remove(oldest)
	}
	r.byToken[key] = r.order.PushBack(cached{key: key, id: id, expires: expires})
}

// cacheUntil is when a token reviewed at now stops being trusted without another review: ttl later, or
// when it expires, if sooner. The token was just authenticated, so its claims can be read without
// checking its signature again; a token whose expiry cannot be read is trusted for ttl.
func cacheUntil(now time.Time, ttl time.Duration, token string) time.Time {
	until := now.Add(ttl)
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return until
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return until
	}
	var claims struct {
		Exp int64 `json:"exp"`
	}
	if err := json.Unmarshal(payload, &claims); err != nil || claims.Exp == 0 {
		return until
	}
	if exp := time.Unix(claims.Exp, 0); exp.Before(until) {
		return exp
	}
	return until
}

// isRefusal reports whether err refuses a token, rather than saying that it could not be reviewed.
func isRefusal(err error) bool {
	var r refusal
	return errors.As(err, &r)
}
