package controllers

import (
	"context"

	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
)

// newDeadlineQueue is a delaying work queue whose items fall due on clk, when clk can tick (a fake clock
// in tests), else on the real clock: the timers of lateNodes and lateMembers.
func newDeadlineQueue[T comparable](name string, clk clock.PassiveClock) workqueue.TypedDelayingInterface[T] {
	var ticking clock.WithTicker = clock.RealClock{}
	if c, ok := clk.(clock.WithTicker); ok {
		ticking = c
	}
	return workqueue.NewTypedDelayingQueueWithConfig(workqueue.TypedDelayingQueueConfig[T]{Name: name, Clock: ticking})
}

// runDeadlines checks each item of q as it falls due, one at a time, until ctx ends.
func runDeadlines[T comparable](ctx context.Context, q workqueue.TypedDelayingInterface[T], check func(context.Context, T)) error {
	go func() {
		<-ctx.Done()
		q.ShutDown()
	}()
	for {
		item, shutdown := q.Get()
		if shutdown {
			return nil
		}
		check(ctx, item)
		q.Done(item)
	}
}
