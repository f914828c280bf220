// Package manager builds the operator's controller-runtime manager: its scheme, its options and the
// controllers and health checks it runs. The operator's command and the local demo (hack/localdev) share it,
// so the demo runs exactly what a cluster runs.
package manager

import (
	"context"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/consumergroup-operator/consumergroup-operator/api/v1alpha1"
	"github.com/consumergroup-operator/consumergroup-operator/controllers"
)

// LeaderElectionID names the Lease replicas compete for.
const LeaderElectionID = "consumergroup-operator.messaging.consumergroup.io"

// Scheme holds the API types the operator reads and writes.
func Scheme() *runtime.Scheme {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		panic(err)
	}
	if err := v1alpha1.AddToScheme(s); err != nil {
		panic(err)
	}
	return s
}

// Options are the manager's options. The cache holds only what the reconciler reads: see
// controllers.CacheByObject.
// namespaces is a comma-separated list of namespaces to watch; empty watches all of them.
func Options(metricsAddr, probeAddr string, leaderElect bool, leaderElectNS, namespaces string) ctrl.Options {
	cacheOpts := cache.Options{
		ByObject: controllers.CacheByObject(),
	}
	if namespaces != "" {
		cacheOpts.DefaultNamespaces = map[string]cache.Config{}
		for _, ns := range strings.Split(namespaces, ",") {
			cacheOpts.DefaultNamespaces[strings.TrimSpace(ns)] = cache.Config{}
		}
	}
	return ctrl.Options{
		Scheme:                  Scheme(),
		Cache:                   cacheOpts,
		Metrics:                 metricsserver.Options{BindAddress: metricsAddr},
		HealthProbeBindAddress:  probeAddr,
		LeaderElection:          leaderElect,
		LeaderElectionID:        LeaderElectionID,
		LeaderElectionNamespace: leaderElectNS,
		// The operator publishes nothing until it has become leader, so a replica that loses the lease can
		// stop at once.
		LeaderElectionReleaseOnCancel: true,
	}
}

// Setup registers the controller and the health checks with mgr. maxClockSkew is how far the clocks of
// member pods and of the operator may differ (protocol.DefaultMaxClockSkew when zero).
func Setup(ctx context.Context, mgr ctrl.Manager, maxClockSkew time.Duration) error {
	recorder, err := eventRecorder(ctx, mgr, "consumergroup-operator")
	if err != nil {
		return err
	}
	r := &controllers.ConsumerGroupReconciler{
		Client:       mgr.GetClient(),
		APIReader:    mgr.GetAPIReader(),
		Recorder:     recorder,
		Clock:        clock.RealClock{},
		MaxClockSkew: maxClockSkew,
	}
	if err := r.SetupWithManager(ctx, mgr); err != nil {
		return err
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return err
	}
	return mgr.AddReadyzCheck("readyz", healthz.Ping)
}
