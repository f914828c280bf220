// Command consumergroup-operator runs the ConsumerGroup controller: it decides which consumer pod reads
// which message queue and publishes the decision in a ConfigMap per group.
package main

import (
	"context"
	"flag"
	"os"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/consumergroup-operator/consumergroup-operator/api/v1alpha1"
	"github.com/consumergroup-operator/consumergroup-operator/controllers"
)

func main() {
	var (
		metricsAddr   string
		probeAddr     string
		leaderElect   bool
		leaderElectNS string
		namespaces    string
	)
	flag.StringVar(&metricsAddr, "metrics-bind-address", ":8080", "Address the metrics endpoint binds to; 0 disables it.")
	flag.StringVar(&probeAddr, "health-probe-bind-address", ":8081", "Address the health and readiness probes bind to.")
	flag.BoolVar(&leaderElect, "leader-elect", false, "Elect a leader through a Lease so that only one replica reconciles.")
	flag.StringVar(&leaderElectNS, "leader-election-namespace", "", "Namespace of the leader election Lease (default: the pod's namespace).")
	flag.StringVar(&namespaces, "namespaces", "", "Comma-separated namespaces to watch; empty watches all namespaces.")
	opts := zap.Options{}
	opts.BindFlags(flag.CommandLine)
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&opts)))
	setupLog := ctrl.Log.WithName("setup")

	ctx := ctrl.SetupSignalHandler()
	mgr, err := ctrl.NewManager(ctrl.GetConfigOrDie(), Options(metricsAddr, probeAddr, leaderElect, leaderElectNS, namespaces))
	if err != nil {
		setupLog.Error(err, "Failed to create the manager")
		os.Exit(1)
	}
	if err := Setup(ctx, mgr); err != nil {
		setupLog.Error(err, "Failed to set up the controller")
		os.Exit(1)
	}
	setupLog.Info("Starting the manager")
	if err := mgr.Start(ctx); err != nil {
		setupLog.Error(err, "The manager stopped with an error")
		os.Exit(1)
	}
}

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

// Options are the manager's options. The cache holds only what the reconciler reads: ConfigMaps the
// operator manages (not every ConfigMap of the cluster), and pods without the fields it never looks at.
func Options(metricsAddr, probeAddr string, leaderElect bool, leaderElectNS, namespaces string) ctrl.Options {
	managed := labels.SelectorFromSet(labels.Set{controllers.ManagedByLabel: controllers.ManagedByValue})
	cacheOpts := cache.Options{
		ByObject: map[client.Object]cache.ByObject{
			&corev1.ConfigMap{}: {Label: managed},
			&corev1.Pod{}:       {Transform: controllers.StripPod},
		},
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
		LeaderElectionID:        "consumergroup-operator.messaging.consumergroup.io",
		LeaderElectionNamespace: leaderElectNS,
		// The operator publishes nothing until it has become leader, so a replica that loses the lease can
		// stop at once.
		LeaderElectionReleaseOnCancel: true,
	}
}

// Setup registers the controller and the health checks with mgr.
func Setup(ctx context.Context, mgr ctrl.Manager) error {
	r := &controllers.ConsumerGroupReconciler{
		Client:   mgr.GetClient(),
		Recorder: mgr.GetEventRecorder("consumergroup-operator"),
		Clock:    clock.RealClock{},
	}
	if err := r.SetupWithManager(ctx, mgr); err != nil {
		return err
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return err
	}
	return mgr.AddReadyzCheck("readyz", healthz.Ping)
}
