// Command localdev runs the operator on a cluster of its own, for `make run` on a machine without one. It
// starts a whole cluster without a kubelet (internal/cluster: etcd, kube-apiserver, kube-controller-manager,
// kube-scheduler, and kwok's nodes in three zones; hack/envtest-bins.sh builds them), installs the CRD,
// starts a RocketMQ name-server stand-in (internal/rocketmqstandin, speaking the remoting protocol) that
// serves the topic orders on two brokers, creates the ClusterNameServer `demo` naming it, applies the Sticky
// group `orders` that discovers its queues from it and the Deployment `order-consumer` whose pods it
// selects, and runs the operator's manager, exactly as main.go builds it. A small HTTP endpoint on the
// loopback interface grows the topic on the stand-in (nameServerControl), so that the reader sees the group
// follow a route change.
//
// kwok runs the pods but not their processes: for every pod it reports running, the demo runs what the
// consumer process would, a pkg/member client that watches the pod's entry in the assignment and
// acknowledges each generation through the pod's Lease; when the pod is deleted, it drains (as a preStop
// hook would) until its grace period ends. The demo prints every generation of the assignment ConfigMap
// and `kubectl get cg` once the group's status follows, and keeps running until interrupted, so that the
// reader can scale, restart and drain with kubectl and watch the assignment follow.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/consumergroup-operator/consumergroup-operator/api/v1alpha1"
	"github.com/consumergroup-operator/consumergroup-operator/internal/cluster"
	"github.com/consumergroup-operator/consumergroup-operator/internal/manager"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/member"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/protocol"
)

func main() {
	var (
		assets    = flag.String("assets", os.Getenv("KUBEBUILDER_ASSETS"), "Directory with etcd, kube-apiserver and kubectl (default: $KUBEBUILDER_ASSETS).")
		sample    = flag.String("sample", "config/samples/demo/orders.yaml", "ConsumerGroup to apply; it may name the ClusterNameServer demo.")
		namespace = flag.String("namespace", "demo", "Namespace of the group and its pods.")
		consumers = flag.String("consumers", "config/samples/demo/order-consumer.yaml", "The workload whose pods the group selects (app=order-consumer).")
		dir       = flag.String("dir", "bin/localdev", "Directory for the kubeconfig and the operator's log.")
	)
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *assets, *sample, *consumers, *namespace, *dir); err != nil {
		fmt.Fprintln(os.Stderr, "localdev:", err)
		os.Exit(1)
	}
}

// run runs the demo until ctx ends, then stops everything it started.
func run(ctx context.Context, assets, sample, consumers, namespace, dir string) error {
	if assets == "" {
		return errors.New("no cluster binaries: set -assets or KUBEBUILDER_ASSETS (make run does)")
	}
	kubectl := filepath.Join(assets, "kubectl")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	logPath, closeLog, err := logToFile(dir)
	if err != nil {
		return err
	}
	defer closeLog()

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	cl, err := startCluster(ctx, assets, dir, namespace)
	if err != nil {
		return err
	}
	defer func() {
		fmt.Println("Stopping the cluster")
		if err := cl.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stopping the cluster:", err)
		}
	}()

	c, err := client.New(cl.Config, client.Options{Scheme: manager.Scheme()})
	if err != nil {
		return err
	}
	if err := createIfMissing(ctx, c, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}); err != nil {
		return err
	}
	group := groupName(sample)
	nsrv, controlURL, err := startNameServer(ctx, c, dir)
	if err != nil {
		return err
	}
	defer nsrv.Close()
	metricsAddr, errs, err := startOperator(ctx, cl.Config)
	if err != nil {
		return err
	}

	// The pods' consumer processes.
	clientset, err := kubernetes.NewForConfig(cl.Config)
	if err != nil {
		return err
	}
	procs := cluster.RunConsumers(ctx, clientset, namespace, "app=order-consumer", func(pod *corev1.Pod) (cluster.Process, error) {
		return startConsumer(ctx, clientset, group, pod)
	})

	for _, file := range []string{sample, consumers} {
		if err := apply(ctx, c, namespace, file); err != nil {
			return err
		}
	}
	printInstructions(logPath, cl, metricsAddr, assets, controlURL, group)

	go show(ctx, cl.Config, kubectl, cl.Kubeconfig, namespace, group)
	// Until ctx ends or the manager fails; then wait for the manager and the consumers to stop before the
	// cluster goes.
	var runErr error
	select {
	case <-ctx.Done():
		runErr = <-errs
	case runErr = <-errs:
		cancel()
	}
	procs.Wait()
	return runErr
}

// logToFile sends the operator's logs (controller-runtime's, client-go's and the member clients') to
// operator.log in dir, so that the terminal shows what it published; it returns the log's path and a
// function that closes it.
func logToFile(dir string) (path string, closeLog func(), err error) {
	path = filepath.Join(dir, "operator.log")
	logFile, err := os.Create(path)
	if err != nil {
		return "", nil, err
	}
	logger := zap.New(zap.WriteTo(logFile))
	logf.SetLogger(logger)
	klog.SetLogger(logger)
	// Only written to; nothing to report once the demo is over.
	return path, func() { _ = logFile.Close() }, nil
}

// startCluster starts the demo's cluster with the CRDs installed and says how long it took.
func startCluster(ctx context.Context, assets, dir, namespace string) (*cluster.Cluster, error) {
	fmt.Println("Starting a cluster (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok) from", assets)
	started := time.Now()
	cl, err := cluster.Start(ctx, cluster.Options{
		Assets:            assets,
		Dir:               dir,
		CRDDirectoryPaths: []string{filepath.Join("config", "crd", "bases")},
		Namespace:         namespace,
	})
	if err != nil {
		return nil, fmt.Errorf("starting the cluster (logs in %s): %w", dir, err)
	}
	fmt.Printf("Cluster up in %s: nodes %s\n", time.Since(started).Round(100*time.Millisecond), strings.Join(cl.Nodes, ", "))
	return cl, nil
}

// startOperator starts the operator, as main.go runs it, without leader election or probes, and with its
// metrics in plain HTTP on a free port of the loopback interface (a fixed one may be taken on a
// developer's machine): nothing off this machine reaches them, and curl reads them without a token. It
// returns the metrics address and the channel that receives the manager's result once it stops.
func startOperator(ctx context.Context, cfg *rest.Config) (metricsAddr string, errs <-chan error, err error) {
	metricsAddr, err = freeLoopbackAddress()
	if err != nil {
		return "", nil, err
	}
	mgr, err := ctrl.NewManager(cfg, manager.Options(metricsAddr, "0", false, "", ""))
	if err != nil {
		return "", nil, err
	}
	if err := manager.Setup(ctx, mgr, manager.Settings{}); err != nil {
		return "", nil, err
	}
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	return metricsAddr, done, nil
}

// printInstructions tells the user where the operator's log and metrics are and what to try: kubectl from
// the cluster's binaries and the kubectl-cg plugin that make run built into bin/ (hack/run.sh) are on the
// PATH line it prints.
func printInstructions(logPath string, cl *cluster.Cluster, metricsAddr, assets, controlURL, group string) {
	fmt.Printf(`
The operator is running (its log: %s). In another terminal:

KUBECONFIG=%s
metrics: http://%s/metrics (plain HTTP, on the loopback interface only; in a cluster the operator serves HTTPS to authorized scrapers, docs/metrics.md)
  export KUBECONFIG=%s PATH=%s:%s:$PATH
  kubectl cg describe %s                # who reads what, and the routes read from the name server
  curl -sS -X PUT '%s/topics/orders?queues=8'   # grow the topic on the name server
  kubectl get cg %s                     # within %ds: the grown topic's queues, over the same members
  kubectl get configmap %s -o yaml
  kubectl scale deployment/order-consumer --replicas=5
  kubectl rollout restart deployment/order-consumer
  kubectl drain %s --ignore-daemonsets
  kubectl uncordon %s
  kubectl delete cg %s      # its ConfigMaps are garbage-collected

Ctrl-C stops the operator and the cluster.
`, logPath, cl.Kubeconfig, metricsAddr, cl.Kubeconfig, mustAbs("bin"), mustAbs(assets), group, controlURL, group, demoRefreshSeconds,
		protocol.AssignmentName(group), cl.Nodes[0], cl.Nodes[0], group)
}

// consumer is a pod's consumer process: a member client that acknowledges every assignment it is given.
type consumer struct {
	client *member.Client
	stop   context.CancelFunc
	done   chan struct{}
}

func startConsumer(ctx context.Context, clientset kubernetes.Interface, group string, pod *corev1.Pod) (*consumer, error) {
	mc, err := member.New(clientset, member.Config{
		Namespace: pod.Namespace, Group: group, Pod: pod.Name, PodUID: pod.UID, AutoAck: true,
	})
	if err != nil {
		return nil, err
	}
	ctx, stop := context.WithCancel(ctx)
	c := &consumer{client: mc, stop: stop, done: make(chan struct{})}
	go func() {
		defer close(c.done)
		if err := mc.Run(ctx); err != nil {
			logf.FromContext(ctx).Error(err, "Member client stopped", "pod", pod.Name)
		}
	}()
	return c, nil
}

func (c *consumer) Drain(ctx context.Context) error { return c.client.Drain(ctx) }

func (c *consumer) Stop() {
	c.stop()
	<-c.done
}

// apply creates the objects of a YAML file in namespace.
func apply(ctx context.Context, c client.Client, namespace, file string) error {
	data, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	for {
		obj := &unstructured.Unstructured{}
		if err := dec.Decode(&obj.Object); errors.Is(err, io.EOF) {
			return nil
		} else if err != nil {
			return fmt.Errorf("%s: %w", file, err)
		}
		if len(obj.Object) == 0 {
			continue
		}
		obj.SetNamespace(namespace)
		if err := c.Create(ctx, obj); err != nil {
			return fmt.Errorf("applying %s: %w", file, err)
		}
		fmt.Printf("Applied %s %s/%s from %s\n", obj.GetKind(), namespace, obj.GetName(), file)
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

// freeLoopbackAddress is an address on 127.0.0.1 with a port nothing listens on now.
func freeLoopbackAddress() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	addr := l.Addr().String()
	return addr, l.Close()
}

func mustAbs(p string) string {
	abs, err := filepath.Abs(p)
	if err != nil {
		return p
	}
	return abs
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
