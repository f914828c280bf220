// Command localdev runs the operator on a control plane of its own, for `make run` on a machine without a
// cluster. It starts etcd and kube-apiserver from KUBEBUILDER_ASSETS (hack/envtest-bins.sh builds them; the tests use the same), installs the CRD,
// creates two nodes in two zones, applies a sample ConsumerGroup and its member pods, and runs the
// operator's manager, exactly as main.go builds it. It prints every generation of the assignment ConfigMap
// and `kubectl get cg` once the group's status follows, and keeps running until interrupted, so that the reader can scale the
// pods with hack/scale.sh and watch the assignment follow.
//
// There is no scheduler, kubelet or controller-manager on this control plane. A small loop stands in for
// the first two: it binds each new pod to the node with the fewest demo pods, marks it Running and Ready,
// and runs for each running pod what its consumer process would: a pkg/member client that watches the
// pod's entry in the assignment, acknowledges each generation through the pod's Lease and, when the pod
// is deleted, drains it (as a preStop hook would) before the deletion completes. Without a garbage
// collector, deleting a group leaves its ConfigMap and Leases behind.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	"github.com/consumergroup-operator/consumergroup-operator/api/v1alpha1"
	"github.com/consumergroup-operator/consumergroup-operator/controllers"
	"github.com/consumergroup-operator/consumergroup-operator/internal/manager"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/member"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/protocol"
)

// The demo's nodes, one per zone of the Sticky sample's brokers.
var nodes = []struct{ name, zone string }{
	{"node-a", "zone-a"},
	{"node-b", "zone-b"},
}

func main() {
	var (
		assets    = flag.String("assets", os.Getenv("KUBEBUILDER_ASSETS"), "Directory with etcd, kube-apiserver and kubectl (default: $KUBEBUILDER_ASSETS).")
		sample    = flag.String("sample", "config/samples/messaging_v1alpha1_consumergroup_sticky.yaml", "ConsumerGroup to apply.")
		namespace = flag.String("namespace", "demo", "Namespace of the group and its pods.")
		pods      = flag.Int("pods", 3, "Member pods to start with.")
		dir       = flag.String("dir", "bin/localdev", "Directory for the kubeconfig and the operator's log.")
	)
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *assets, *sample, *namespace, *pods, *dir); err != nil {
		fmt.Fprintln(os.Stderr, "localdev:", err)
		os.Exit(1)
	}
}

// run runs the demo until ctx ends, then stops everything it started.
func run(ctx context.Context, assets, sample, namespace string, pods int, dir string) error {
	if assets == "" {
		return errors.New("no control-plane binaries: set -assets or KUBEBUILDER_ASSETS (make run does)")
	}
	kubectl := filepath.Join(assets, "kubectl")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	kubeconfigPath, err := filepath.Abs(filepath.Join(dir, "kubeconfig"))
	if err != nil {
		return err
	}

	// The operator logs to a file; the terminal shows what it published.
	logPath := filepath.Join(dir, "operator.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return err
	}
	defer func() { _ = logFile.Close() }() // Only written to; nothing to report once the demo is over.
	logger := zap.New(zap.WriteTo(logFile))
	logf.SetLogger(logger)
	klog.SetLogger(logger) // client-go's and the member clients' logs

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	fmt.Println("Starting etcd and kube-apiserver from", assets)
	env := &envtest.Environment{
		BinaryAssetsDirectory: assets,
		CRDDirectoryPaths:     []string{filepath.Join("config", "crd", "bases")},
		ErrorIfCRDPathMissing: true,
	}
	cfg, err := env.Start()
	if err != nil {
		return fmt.Errorf("starting the control plane: %w", err)
	}
	defer func() {
		fmt.Println("Stopping the control plane")
		if err := env.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stopping the control plane:", err)
		}
		// The kubeconfig names a server that no longer exists.
		_ = os.Remove(kubeconfigPath)
	}()
	if err := writeKubeconfig(env.KubeConfig, namespace, kubeconfigPath); err != nil {
		return err
	}

	c, err := client.New(cfg, client.Options{Scheme: manager.Scheme()})
	if err != nil {
		return err
	}
	if err := setUp(ctx, c, namespace, sample); err != nil {
		return err
	}

	// The operator, as main.go runs it (without leader election, metrics or probes, whose ports may be
	// taken on a developer's machine).
	mgr, err := ctrl.NewManager(cfg, manager.Options("0", "0", false, "", ""))
	if err != nil {
		return err
	}
	if err := manager.Setup(ctx, mgr, 0); err != nil {
		return err
	}
	// The stand-in scheduler and kubelet, in a manager of its own so that it sees whole pods, not the
	// operator's stripped copies.
	kubelet, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:  manager.Scheme(),
		Metrics: metricsserver.Options{BindAddress: "0"},
		Cache:   cache.Options{DefaultNamespaces: map[string]cache.Config{namespace: {}}},
	})
	if err != nil {
		return err
	}
	clientset, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	fk := &fakeKubelet{Client: kubelet.GetClient(), clientset: clientset, group: groupName(sample), ctx: ctx,
		consumers: map[string]*consumer{}}
	if err := ctrl.NewControllerManagedBy(kubelet).Named("fake-kubelet").
		For(&corev1.Pod{}, builder.WithPredicates(predicate.ResourceVersionChangedPredicate{})).
		Complete(fk); err != nil {
		return err
	}
	errs := make(chan error, 2)
	go func() { errs <- kubelet.Start(ctx) }()
	go func() { errs <- mgr.Start(ctx) }()

	// The member pods, created as a reader would with hack/scale.sh.
	scale := exec.CommandContext(ctx, "hack/scale.sh", fmt.Sprint(pods))
	scale.Env = append(os.Environ(), "KUBECONFIG="+kubeconfigPath, "KUBECTL="+kubectl)
	scale.Stdout, scale.Stderr = os.Stdout, os.Stderr
	if err := scale.Run(); err != nil {
		return fmt.Errorf("hack/scale.sh %d: %w", pods, err)
	}

	fmt.Printf(`
The operator is running (its log: %s). In another terminal:

  export KUBECONFIG=%s
  export PATH=%s:$PATH
  kubectl get cg -o wide
  kubectl get configmap %s -o yaml
  hack/scale.sh 5      # five member pods
  hack/scale.sh 2      # two

Ctrl-C stops the operator and the control plane.
`, logPath, kubeconfigPath, mustAbs(assets), protocol.AssignmentName(groupName(sample)))

	go show(ctx, cfg, kubectl, kubeconfigPath, namespace, groupName(sample))
	// Until ctx ends or a manager fails; then wait for both managers and the member clients to stop
	// before the control plane goes.
	var firstErr error
	running := 2
	select {
	case <-ctx.Done():
	case firstErr = <-errs:
		running--
		cancel()
	}
	fk.wg.Wait()
	for ; running > 0; running-- {
		if err := <-errs; err != nil && firstErr == nil {
			firstErr = err
		}
	}
	return firstErr
}

// writeKubeconfig writes the control plane's admin kubeconfig with namespace as the context's namespace, so
// that kubectl needs no -n.
func writeKubeconfig(data []byte, namespace, path string) error {
	kc, err := clientcmd.Load(data)
	if err != nil {
		return err
	}
	for _, c := range kc.Contexts {
		c.Namespace = namespace
	}
	return clientcmd.WriteToFile(*kc, path)
}

// setUp creates the demo's namespace and nodes and applies the sample group in namespace.
func setUp(ctx context.Context, c client.Client, namespace, sample string) error {
	if err := createIfMissing(ctx, c, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}); err != nil {
		return err
	}
	for _, n := range nodes {
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.name, Labels: map[string]string{controllers.ZoneLabel: n.zone}}}
		if err := createIfMissing(ctx, c, node); err != nil {
			return err
		}
	}
	data, err := os.ReadFile(sample)
	if err != nil {
		return err
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	for {
		obj := &unstructured.Unstructured{}
		if err := dec.Decode(&obj.Object); errors.Is(err, io.EOF) {
			return nil
		} else if err != nil {
			return fmt.Errorf("%s: %w", sample, err)
		}
		if len(obj.Object) == 0 {
			continue
		}
		obj.SetNamespace(namespace)
		if err := c.Create(ctx, obj); err != nil {
			return fmt.Errorf("applying %s: %w", sample, err)
		}
		fmt.Printf("Applied %s %s/%s from %s\n", obj.GetKind(), namespace, obj.GetName(), sample)
	}
}

func createIfMissing(ctx context.Context, c client.Client, obj client.Object) error {
	if err := c.Create(ctx, obj); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	return nil
}

// groupName reads the name of the first object in the sample file; the demo applies one group.
func groupName(sample string) string {
	data, err := os.ReadFile(sample)
	if err != nil {
		return ""
	}
	obj := &unstructured.Unstructured{}
	if err := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096).Decode(&obj.Object); err != nil {
		return ""
	}
	return obj.GetName()
}

func mustAbs(p string) string {
	abs, err := filepath.Abs(p)
	if err != nil {
		return p
	}
	return abs
}

// fakeKubelet does what a scheduler, a kubelet and the consumer processes would do to the demo's pods: it
// binds a new pod to the node with the fewest pods, reports a bound pod Running and Ready, runs a member
// client for each running pod, and completes a deletion once the pod drained.
type fakeKubelet struct {
	client.Client
	clientset kubernetes.Interface
	group     string
	// ctx bounds the member clients, which outlive a Reconcile call.
	ctx context.Context
	wg  sync.WaitGroup

	mu        sync.Mutex
	consumers map[string]*consumer // by pod name
}

// consumer is a running pod's member client.
type consumer struct {
	uid      string
	client   *member.Client
	stop     context.CancelFunc
	draining bool
}

func (k *fakeKubelet) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var pod corev1.Pod
	if err := k.Get(ctx, req.NamespacedName, &pod); err != nil {
		if apierrors.IsNotFound(err) {
			k.stopConsumer(req.Name, "")
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	switch {
	case pod.DeletionTimestamp != nil:
		k.drainAndDelete(pod)
		return ctrl.Result{}, nil
	case pod.Spec.NodeName == "":
		node, err := k.leastLoadedNode(ctx, pod.Namespace)
		if err != nil {
			return ctrl.Result{}, err
		}
		binding := &corev1.Binding{
			ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: pod.Namespace},
			Target:     corev1.ObjectReference{Kind: "Node", Name: node},
		}
		return ctrl.Result{}, k.SubResource("binding").Create(ctx, &pod, binding)
	case pod.Status.Phase != corev1.PodRunning:
		now := metav1.Now()
		pod.Status.Phase = corev1.PodRunning
		pod.Status.StartTime = &now
		for _, t := range []corev1.PodConditionType{corev1.PodScheduled, corev1.PodInitialized, corev1.ContainersReady, corev1.PodReady} {
			pod.Status.Conditions = append(slices.DeleteFunc(pod.Status.Conditions, func(c corev1.PodCondition) bool { return c.Type == t }),
				corev1.PodCondition{Type: t, Status: corev1.ConditionTrue, LastTransitionTime: now})
		}
		pod.Status.ContainerStatuses = nil
		for _, c := range pod.Spec.Containers {
			pod.Status.ContainerStatuses = append(pod.Status.ContainerStatuses, corev1.ContainerStatus{
				Name: c.Name, Image: c.Image, Ready: true, Started: new(true),
				State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}},
			})
		}
		return ctrl.Result{}, k.Status().Update(ctx, &pod)
	default:
		return ctrl.Result{}, k.startConsumer(pod)
	}
}

// startConsumer runs the pod's member client, which acknowledges every assignment it is given.
func (k *fakeKubelet) startConsumer(pod corev1.Pod) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if c, ok := k.consumers[pod.Name]; ok && c.uid == string(pod.UID) {
		return nil
	}
	mc, err := member.New(k.clientset, member.Config{
		Namespace: pod.Namespace, Group: k.group, Pod: pod.Name, PodUID: pod.UID, AutoAck: true,
	})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(k.ctx)
	k.consumers[pod.Name] = &consumer{uid: string(pod.UID), client: mc, stop: cancel}
	k.wg.Go(func() {
		if err := mc.Run(ctx); err != nil {
			logf.FromContext(ctx).Error(err, "Member client stopped", "pod", pod.Name)
		}
	})
	return nil
}

// stopConsumer stops the pod's member client; uid "" stops whichever runs under the name.
func (k *fakeKubelet) stopConsumer(name, uid string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if c, ok := k.consumers[name]; ok && (uid == "" || c.uid == uid) {
		c.stop()
		delete(k.consumers, name)
	}
}

// drainAndDelete does what a pod's preStop hook and kubelet do on deletion: wait (up to 15 seconds) until
// the operator has released the pod's queues, stop the consumer, then remove the pod.
func (k *fakeKubelet) drainAndDelete(pod corev1.Pod) {
	k.mu.Lock()
	c := k.consumers[pod.Name]
	if c != nil && c.uid == string(pod.UID) {
		if c.draining {
			k.mu.Unlock()
			return
		}
		c.draining = true
	} else {
		c = nil
	}
	k.mu.Unlock()
	k.wg.Go(func() {
		if c != nil {
			ctx, cancel := context.WithTimeout(k.ctx, 15*time.Second)
			if err := c.client.Drain(ctx); err != nil {
				logf.FromContext(ctx).Error(err, "Drain did not finish", "pod", pod.Name)
			}
			cancel()
		}
		k.stopConsumer(pod.Name, string(pod.UID))
		if err := k.Delete(k.ctx, &pod, client.GracePeriodSeconds(0), client.Preconditions{UID: &pod.UID}); err != nil && !apierrors.IsNotFound(err) {
			logf.FromContext(k.ctx).Error(err, "Failed to delete a pod", "pod", pod.Name)
		}
	})
}

// leastLoadedNode is the demo node with the fewest pods in namespace, the first by name on a tie, so that
// pods spread over the zones.
func (k *fakeKubelet) leastLoadedNode(ctx context.Context, namespace string) (string, error) {
	var pods corev1.PodList
	if err := k.List(ctx, &pods, client.InNamespace(namespace)); err != nil {
		return "", err
	}
	load := map[string]int{}
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil {
			load[p.Spec.NodeName]++
		}
	}
	best := nodes[0].name
	for _, n := range nodes[1:] {
		if load[n.name] < load[best] {
			best = n.name
		}
	}
	return best, nil
}

// show prints every generation of the assignment ConfigMap as it is published, and `kubectl get cg -o wide`
// whenever the group's status has caught up with a new one.
func show(ctx context.Context, cfg *rest.Config, kubectl, kubeconfig, namespace, group string) {
	wc, err := client.NewWithWatch(cfg, client.Options{Scheme: manager.Scheme()})
	if err != nil {
		fmt.Fprintln(os.Stderr, "watching the assignment:", err)
		return
	}
	cmName := protocol.AssignmentName(group)
	var printed, shownStatus int64
	for ctx.Err() == nil {
		w, err := wc.Watch(ctx, &corev1.ConfigMapList{}, client.InNamespace(namespace),
			client.MatchingFields{"metadata.name": cmName})
		if err != nil {
			time.Sleep(time.Second)
			continue
		}
		tick := time.NewTicker(250 * time.Millisecond)
	events:
		for {
			select {
			case <-ctx.Done():
				break events
			case ev, ok := <-w.ResultChan():
				if !ok {
					break events
				}
				cm, isCM := ev.Object.(*corev1.ConfigMap)
				if !isCM {
					continue
				}
				gen, _ := strconv.ParseInt(cm.Annotations[protocol.GenerationAnnotation], 10, 64)
				if gen <= printed {
					continue
				}
				printed = gen
				printGeneration(cm, gen)
			case <-tick.C:
				// The status follows the ConfigMap; show it once it describes the newest generation.
				var cg v1alpha1.ConsumerGroup
				if printed == shownStatus || wc.Get(ctx, client.ObjectKey{Namespace: namespace, Name: group}, &cg) != nil ||
					cg.Status.AssignmentGeneration != printed || cg.Status.ObservedGeneration != cg.Generation {
					continue
				}
				shownStatus = printed
				fmt.Println("$ kubectl get cg -o wide")
				get := exec.CommandContext(ctx, kubectl, "--kubeconfig", kubeconfig, "get", "cg", "-o", "wide")
				get.Stdout, get.Stderr = os.Stdout, os.Stderr
				_ = get.Run()
			}
		}
		tick.Stop()
		w.Stop()
	}
}

// printGeneration prints one published generation: each member pod's queues, in the ConfigMap's encoding.
func printGeneration(cm *corev1.ConfigMap, gen int64) {
	keys := make([]string, 0, len(cm.Data))
	for k := range cm.Data {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	fmt.Printf("\n%s  ConfigMap %s, generation %d (%d member pods):\n", time.Now().Format(time.TimeOnly), cm.Name, gen, len(keys))
	for _, k := range keys {
		fmt.Printf("  %s: %s\n", k, strings.TrimSpace(cm.Data[k]))
	}
}
