package observe

import (
	"context"
	"time"

	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/consumergroup-operator/consumergroup-operator/api/v1alpha1"
	"github.com/consumergroup-operator/consumergroup-operator/internal/plan"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/protocol"
)

// PreviewGroup computes group's Preview from what c reads (the API server, for a command line tool), at
// now. The preview of a paused group is the plan it would publish once resumed.
func PreviewGroup(ctx context.Context, c client.Reader, group *v1alpha1.ConsumerGroup, now time.Time) (*plan.Preview, error) {
	// The clock dates what Observe reads back, as a pass would; a preview keeps none of it, and has no
	// sightings of earlier passes.
	o := Observer{Cached: c, Live: c, Clock: clock.RealClock{}, MaxSkew: protocol.DefaultMaxClockSkew, Memory: &SingleLook{}, Nodes: &NodeLeaseSightings{}}
	// Discovered topics as the operator last recorded their routes.
	topo := plan.TopologyOf(group, group.Status.Routes)
	obs, err := o.Observe(ctx, group, topo, now)
	if err != nil {
		return nil, err
	}
	strategy, prob := plan.NewStrategy(group)
	return plan.PreviewOf(group, obs, plan.Env{Now: now, MaxSkew: protocol.DefaultMaxClockSkew, Topology: topo, Strategy: strategy, StrategyProblem: prob}), nil
}
