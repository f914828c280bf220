// Package cluster starts a whole Kubernetes cluster on one machine, without a kubelet, for the demo and the
// end-to-end tests: etcd and kube-apiserver (through controller-runtime's envtest), the real
// kube-controller-manager (Deployments, ReplicaSets, StatefulSets, the garbage collector, namespaces,
// disruption budgets, node lifecycle) and kube-scheduler, and kwok, which plays the kubelets of fake nodes
// spread over zones: it marks scheduled pods Running and Ready with pod IPs, and ends a deleted pod's life
// at a random moment within its grace period. hack/envtest-bins.sh builds all of them from Go modules.
//
// What kwok does not run is the pods' processes: Consumers runs one for each pod, as its container would.
package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// ZoneLabel is the well-known label of a node's zone.
const ZoneLabel = "topology.kubernetes.io/zone"

// NodeSelector selects the cluster's kwok nodes; workloads put it in their pod templates.
var NodeSelector = map[string]string{"type": "kwok"}

// Options say what to start.
type Options struct {
	// Assets is the directory of the binaries (hack/envtest-bins.sh prints it); empty means
	// $KUBEBUILDER_ASSETS.
	Assets string
	// Dir receives the kubeconfig and a log file per process. Required.
	Dir string
	// CRDDirectoryPaths are installed once the API server is up.
	CRDDirectoryPaths []string
	// Zones get NodesPerZone kwok nodes each: node kwok-<zone>-<i>. Default: zone-a, zone-b, zone-c.
	Zones []string
	// NodesPerZone defaults to 1.
	NodesPerZone int
	// Namespace is the kubeconfig context's namespace, so that kubectl needs no -n; empty means default.
	Namespace string
}

// Cluster is a running cluster.
type Cluster struct {
	// Config is the admin's client configuration.
	Config *rest.Config
	// Kubeconfig is the path of the admin's kubeconfig.
	Kubeconfig string
	// Nodes are the kwok nodes' names, in the order of Options.Zones.
	Nodes []string

	env   *envtest.Environment
	procs []*process
}

// process is one of the cluster's components, run as a child process.
type process struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
	log  *os.File
}

// Start starts the cluster and returns once every node is Ready. On error it stops what it started.
func Start(ctx context.Context, opts Options) (c *Cluster, err error) {
	if err := opts.setDefaults(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(opts.Dir, 0o755); err != nil {
		return nil, err
	}
	dir, err := filepath.Abs(opts.Dir)
	if err != nil {
		return nil, err
	}

	c = &Cluster{env: &envtest.Environment{
		BinaryAssetsDirectory: opts.Assets,
		CRDDirectoryPaths:     opts.CRDDirectoryPaths,
		ErrorIfCRDPathMissing: len(opts.CRDDirectoryPaths) > 0,
	}}
	if c.Config, err = c.env.Start(); err != nil {
		return nil, fmt.Errorf("starting etcd and kube-apiserver: %w", err)
	}
	defer func() {
		if err != nil {
			_ = c.Stop() // The start's error says what went wrong; the stop's would hide it.
			c = nil
		}
	}()
	c.Kubeconfig = filepath.Join(dir, "kubeconfig")
	if err := writeKubeconfig(c.env.KubeConfig, opts.Namespace, c.Kubeconfig); err != nil {
		return c, err
	}

	if err := c.startComponents(dir, opts.Assets); err != nil {
		return c, err
	}
	cs, err := kubernetes.NewForConfig(c.Config)
	if err != nil {
		return c, err
	}
	if err := c.createNodes(ctx, cs, opts.Zones, opts.NodesPerZone); err != nil {
		return c, err
	}
	if err := c.waitNodesReady(ctx, cs); err != nil {
		return c, err
	}
	return c, nil
}

// setDefaults fills in what opts leaves unset, and fails without the cluster's binaries.
func (opts *Options) setDefaults() error {
	if opts.Assets == "" {
		opts.Assets = os.Getenv("KUBEBUILDER_ASSETS")
	}
	if opts.Assets == "" {
		return errors.New("no cluster binaries: set Options.Assets or KUBEBUILDER_ASSETS (hack/envtest-bins.sh builds them)")
	}
	if len(opts.Zones) == 0 {
		opts.Zones = []string{"zone-a", "zone-b", "zone-c"}
	}
	if opts.NodesPerZone <= 0 {
		opts.NodesPerZone = 1
	}
	return nil
}

// startComponents runs the controller-manager, the scheduler and kwok against the API server, each
// logging to dir.
func (c *Cluster) startComponents(dir, assets string) error {
	kc := c.Kubeconfig
	// The envtest API server runs without the ServiceAccount admission plugin, so pods need no token and
	// the token controllers stay off; csrsigning has no CA to sign with.
	if err := c.run(dir, assets, "kube-controller-manager",
		"--kubeconfig="+kc, "--authentication-kubeconfig="+kc, "--authorization-kubeconfig="+kc,
		"--leader-elect=false", "--secure-port=0", "--use-service-account-credentials=false",
		"--controllers=*,-csrsigning,-serviceaccount-token"); err != nil {
		return err
	}
	if err := c.run(dir, assets, "kube-scheduler",
		"--kubeconfig="+kc, "--authentication-kubeconfig="+kc, "--authorization-kubeconfig="+kc,
		"--leader-elect=false", "--secure-port=0"); err != nil {
		return err
	}
	// kwok manages only the nodes created below (by their annotation), so a node added by hand with
	// another kubelet in mind is left alone.
	if err := c.run(dir, assets, "kwok",
		"--kubeconfig="+kc, "--config="+filepath.Join(assets, "kwok-stages.yaml"),
		"--manage-all-nodes=false", "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
		"--cidr=10.0.0.1/16", "--node-ip=10.0.0.1", "--node-lease-duration-seconds=40"); err != nil {
		return err
	}
	return nil
}

// createNodes creates perZone kwok nodes in each of zones.
func (c *Cluster) createNodes(ctx context.Context, cs kubernetes.Interface, zones []string, perZone int) error {
	for _, zone := range zones {
		for i := range perZone {
			name := fmt.Sprintf("kwok-%s-%d", zone, i)
			node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{
				Name:        name,
				Annotations: map[string]string{"kwok.x-k8s.io/node": "fake"},
				Labels: map[string]string{"type": "kwok", ZoneLabel: zone, "kubernetes.io/hostname": name,
					"kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64"},
			}}
			if _, err := cs.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
				return fmt.Errorf("creating node %s: %w", name, err)
			}
			c.Nodes = append(c.Nodes, name)
		}
	}
	return nil
}

// run starts one component with its output in dir/<name>.log.
func (c *Cluster) run(dir, assets, name string, args ...string) error {
	log, err := os.Create(filepath.Join(dir, name+".log"))
	if err != nil {
		return err
	}
	cmd := exec.Command(filepath.Join(assets, name), args...)
	cmd.Stdout, cmd.Stderr = log, log
	// Its own process group, so that a Ctrl-C meant for the demo reaches the components only through Stop,
	// after the members have drained; killed if this process dies without stopping it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		_ = log.Close()
		return fmt.Errorf("starting %s: %w", name, err)
	}
	p := &process{name: name, cmd: cmd, done: make(chan struct{}), log: log}
	go func() { _ = cmd.Wait(); close(p.done) }()
	c.procs = append(c.procs, p)
	return nil
}

// waitNodesReady waits until kwok has marked every node Ready, or a component has exited.
func (c *Cluster) waitNodesReady(ctx context.Context, cs kubernetes.Interface) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	for {
		ready := 0
		for _, name := range c.Nodes {
			node, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			if err == nil && nodeReady(node) {
				ready++
			}
		}
		if ready == len(c.Nodes) {
			return nil
		}
		for _, p := range c.procs {
			select {
			case <-p.done:
				return fmt.Errorf("%s exited: see %s", p.name, p.log.Name())
			default:
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d of %d nodes Ready: %w", ready, len(c.Nodes), ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func nodeReady(node *corev1.Node) bool {
	for _, cond := range node.Status.Conditions {
		if cond.Type == corev1.NodeReady {
			return cond.Status == corev1.ConditionTrue
		}
	}
	return false
}

// Stop stops the components, then the API server and etcd.
func (c *Cluster) Stop() error {
	var errs []error
	for i := len(c.procs) - 1; i >= 0; i-- {
		p := c.procs[i]
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.done
		}
		_ = p.log.Close()
	}
	c.procs = nil
	if c.env != nil {
		if err := c.env.Stop(); err != nil {
			errs = append(errs, fmt.Errorf("stopping etcd and kube-apiserver: %w", err))
		}
	}
	if c.Kubeconfig != "" {
		// It names a server that no longer exists.
		_ = os.Remove(c.Kubeconfig)
	}
	return errors.Join(errs...)
}

// writeKubeconfig writes the admin kubeconfig, with namespace as the context's namespace when not empty.
func writeKubeconfig(data []byte, namespace, path string) error {
	kc, err := clientcmd.Load(data)
	if err != nil {
		return err
	}
	if namespace != "" {
		for _, ctx := range kc.Contexts {
			ctx.Namespace = namespace
		}
	}
	return clientcmd.WriteToFile(*kc, path)
}
