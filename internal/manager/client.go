package manager

import (
	"fmt"

	"k8s.io/client-go/rest"
)

// ClientRateLimit is the client side's limit on requests to the API server: a token bucket that refills QPS
// tokens a second and holds Burst. client-go keeps one bucket per client, and controller-runtime's client
// has one client per kind of object, so the limit holds for each kind the operator writes (ConfigMaps,
// group status, Leases, events) on its own. Reads from the cache cost nothing.
type ClientRateLimit struct {
	QPS   float32
	Burst int
}

// DefaultClientRateLimit is sized for a cluster of 10,000 consumer pods. In groups of about 10 that is
// 1,000 groups, and an event that touches all of them (an operator failover, a drained zone, a rollout of
// every consumer) costs each group about two generations under Cooperative handoff (revoke, then grant),
// each a ConfigMap write, a status write and an event: 2,000 requests of each kind. At 100 a second they
// take 20 s; at controller-runtime's default of 20 a second, 100 s, while the moving queues wait for
// their new readers. A burst of 200 lets the writes of a few dozen groups out at once, so the common case,
// a few groups changing, never waits. The limit is also the ceiling a reconcile loop gone wrong puts on
// the API server: 100 writes a second of a kind, where an unlimited loop would take what API Priority and
// Fairness leaves it.
var DefaultClientRateLimit = ClientRateLimit{QPS: 100, Burst: 200}

// Validate refuses a limit client-go would read as something else: QPS 0 means client-go's default of 5,
// a negative QPS no limit at all, and a burst below 1 lets no request through.
func (l ClientRateLimit) Validate() error {
	if l.QPS <= 0 || l.Burst < 1 {
		return fmt.Errorf("client rate limit: want QPS (%v) > 0 and burst (%d) >= 1", l.QPS, l.Burst)
	}
	return nil
}

// Apply returns a copy of cfg whose clients keep to l.
func (l ClientRateLimit) Apply(cfg *rest.Config) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.Burst = l.QPS, l.Burst
	// A RateLimiter set on the config would win over QPS and Burst.
	cfg.RateLimiter = nil
	return cfg
}
