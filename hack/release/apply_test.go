//go:build envtest

package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/cli"
	appsv1 "k8s.io/api/apps/v1"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// TestApplyDryRun server-side applies, with dry-run, everything a user may install against a real
// kube-apiserver: the chart rendered with the default and the non-default values, dist/install.yaml and
// kustomize's config/default. Server-side apply refuses a field the schema lacks, a wrong type or a
// missing required field, so each object is checked against the API server's own schema.
func TestApplyDryRun(t *testing.T) {
	c, _ := startAPIServer(t)
	ctx := context.Background()
	for _, ns := range []string{"consumergroup-system", "ops", "orders", "payments", "rocketmq-credentials"} {
		must(t, c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	}

	install, err := renderInstall(root, "registry.example/cg/consumergroup-operator", "0.1.0")
	must(t, err)
	plain, err := kustomize(filesys.MakeFsOnDisk(), filepath.Join(root, "config", "default"))
	must(t, err)
	sets := map[string][]*unstructured.Unstructured{
		"chart, default values":                  renderChart(t, nil, "consumergroup-system"),
		"chart, non-default values":              renderChart(t, nonDefaultValues, "ops"),
		"chart, cert-manager served":             renderChartWithAPIs(t, nil, "consumergroup-system", "cert-manager.io/v1"),
		"chart, node agent":                      renderChart(t, nodeAgentValues, "consumergroup-system"),
		"dist/install.yaml":                      decodeAll(t, install),
		"config/default":                         decodeAll(t, plain),
		"config/default with config/certmanager": renderWithCertManager(t),
		"config/default with config/nodeagent":   renderWithNodeAgent(t),
	}
	for name, objs := range sets {
		t.Run(name, func(t *testing.T) {
			kinds := map[string]int{}
			for _, o := range objs {
				if o.GetAPIVersion() == "monitoring.coreos.com/v1" || o.GetAPIVersion() == "cert-manager.io/v1" {
					// No Prometheus Operator nor cert-manager here to serve these; TestChartNonDefaults and
					// checkCertManagerChain decode them strictly into Go types instead.
					continue
				}
				err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(o), client.DryRunAll,
					client.FieldOwner("consumergroup-release-test"), client.ForceOwnership)
				if err != nil {
					t.Errorf("%s %s/%s: %v", o.GetKind(), o.GetNamespace(), o.GetName(), err)
				}
				kinds[o.GetKind()]++
			}
			// Each set carries the CRD, the operator's access, its Deployment and its metrics Service.
			for _, kind := range []string{"CustomResourceDefinition", "ServiceAccount", "ClusterRole", "Deployment", "Service"} {
				if kinds[kind] == 0 {
					t.Errorf("no %s applied, of %v", kind, kinds)
				}
			}
		})
	}

	// The dry runs stored nothing.
	var crds unstructured.UnstructuredList
	crds.SetAPIVersion("apiextensions.k8s.io/v1")
	crds.SetKind("CustomResourceDefinitionList")
	must(t, c.List(ctx, &crds))
	if len(crds.Items) != 0 {
		t.Errorf("%d CRDs stored by dry runs", len(crds.Items))
	}
	var sa corev1.ServiceAccount
	if err := c.Get(ctx, client.ObjectKey{Namespace: "consumergroup-system", Name: "consumergroup-controller-manager"}, &sa); !apierrors.IsNotFound(err) {
		t.Errorf("the ServiceAccount of a dry run: %v", err)
	}
}

// TestPodsPassRestrictedPodSecurity creates, with dry-run, a pod from the template of every Deployment and
// DaemonSet an install may hold (the chart with the node agent and with the non-default values, and
// config/default with config/nodeagent) in a namespace that enforces the restricted Pod Security Standard:
// the API server's PodSecurity admission refuses any that breaks it. A pod that shares the node's network
// is refused there first, so that a pass is the standard's doing.
func TestPodsPassRestrictedPodSecurity(t *testing.T) {
	c, _ := startAPIServer(t)
	ctx := context.Background()
	const ns = "restricted"
	must(t, c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns,
		Labels: map[string]string{"pod-security.kubernetes.io/enforce": "restricted", "pod-security.kubernetes.io/enforce-version": "latest"}}}))
	templates := map[string]corev1.PodTemplateSpec{}
	for set, objs := range map[string][]*unstructured.Unstructured{
		"chart, node agent":                    renderChart(t, nodeAgentValues, "consumergroup-system"),
		"chart, non-default values":            renderChart(t, nonDefaultValues, "ops"),
		"config/default with config/nodeagent": renderWithNodeAgent(t),
	} {
		for _, o := range objs {
			switch o.GetKind() {
			case "Deployment":
				var d appsv1.Deployment
				as(t, o, &d)
				templates[set+": Deployment "+d.Name] = d.Spec.Template
			case "DaemonSet":
				var d appsv1.DaemonSet
				as(t, o, &d)
				templates[set+": DaemonSet "+d.Name] = d.Spec.Template
			}
		}
	}
	create := func(tmpl corev1.PodTemplateSpec) error {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{GenerateName: "pss-", Namespace: ns, Labels: tmpl.Labels}, Spec: tmpl.Spec}
		// The ServiceAccount admission plugin wants the pod's ServiceAccount to exist.
		sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: tmpl.Spec.ServiceAccountName, Namespace: ns}}
		if err := c.Create(ctx, sa); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
		return c.Create(ctx, pod, client.DryRunAll)
	}
	var agents int
	for name, tmpl := range templates {
		if err := create(tmpl); err != nil {
			t.Errorf("%s: %v", name, err)
		}
		if strings.Contains(name, "DaemonSet") {
			agents++
			tmpl.Spec.HostNetwork = true
			if err := create(tmpl); err == nil || !strings.Contains(err.Error(), "restricted") {
				t.Errorf("%s with hostNetwork: %v, want it refused by the restricted standard", name, err)
			}
		}
	}
	if agents != 3 {
		t.Errorf("%d node agent DaemonSets checked of %v, want 3", agents, keys(templates))
	}
}

// TestInstallForReal runs the README's install commands' last step against a real kube-apiserver, once
// each way: kubectl apply -f dist/install.yaml, and helm install of the packaged chart. No kubelet runs
// here, so the check is that everything was accepted and stored: the CRD is established, the Deployment
// runs the versioned image.
func TestInstallForReal(t *testing.T) {
	c, kubeconfig := startAPIServer(t)
	dir := t.TempDir()

	// make release's two outputs, as TestMakeRelease checks they are written.
	install, err := renderInstall(root, "registry.example/cg/consumergroup-operator", "0.1.0")
	must(t, err)
	installPath := filepath.Join(dir, "install.yaml")
	must(t, os.WriteFile(installPath, install, 0o644))
	chartPath, err := packageChart(chartDir, "0.1.0", "registry.example/cg", dir)
	must(t, err)

	kubectl := filepath.Join(os.Getenv("KUBEBUILDER_ASSETS"), "kubectl")
	if out, err := exec.Command(kubectl, "--kubeconfig", kubeconfig, "apply", "-f", installPath).CombinedOutput(); err != nil {
		t.Fatalf("kubectl apply -f install.yaml: %v\n%s", err, out)
	}
	waitImage(t, c, client.ObjectKey{Namespace: "consumergroup-system", Name: "consumergroup-controller-manager"},
		"registry.example/cg/consumergroup-operator:0.1.0")
	if out, err := exec.Command(kubectl, "--kubeconfig", kubeconfig, "wait", "--for=condition=Established", "--timeout=30s",
		"crd/consumergroups.messaging.consumergroup.io").CombinedOutput(); err != nil {
		t.Fatalf("the CRD is not established: %v\n%s", err, out)
	}

	settings := cli.New()
	settings.KubeConfig = kubeconfig
	var hc action.Configuration
	must(t, hc.Init(settings.RESTClientGetter(), "helm-installed", "secret", t.Logf))
	inst := action.NewInstall(&hc)
	inst.ReleaseName, inst.Namespace, inst.CreateNamespace = "cgo", "helm-installed", true
	ch, err := loader.Load(chartPath)
	must(t, err)
	if _, err := inst.Run(ch, nil); err != nil {
		t.Fatalf("helm install: %v", err)
	}
	waitImage(t, c, client.ObjectKey{Namespace: "helm-installed", Name: "cgo-consumergroup-operator-controller-manager"},
		"registry.example/cg/consumergroup-operator:0.1.0")
}

// TestChartKeepsMetricsCertificate: helm install against a cluster without cert-manager generates the
// metrics certificate (metrics.certificate: auto, so chart), and helm upgrade keeps it, reading it back
// with lookup, so the CA Prometheus verifies against does not change under it.
func TestChartKeepsMetricsCertificate(t *testing.T) {
	c, kubeconfig := startAPIServer(t)
	ctx := context.Background()
	settings := cli.New()
	settings.KubeConfig = kubeconfig
	var hc action.Configuration
	must(t, hc.Init(settings.RESTClientGetter(), "ops", "secret", t.Logf))
	ch, err := loader.LoadDir(chartDir)
	must(t, err)
	inst := action.NewInstall(&hc)
	inst.ReleaseName, inst.Namespace, inst.CreateNamespace = "cgo", "ops", true
	if _, err := inst.Run(ch, nil); err != nil {
		t.Fatalf("helm install: %v", err)
	}
	key := client.ObjectKey{Namespace: "ops", Name: "cgo-consumergroup-operator-metrics-chart-cert"}
	var installed corev1.Secret
	must(t, c.Get(ctx, key, &installed))

	up := action.NewUpgrade(&hc)
	up.Namespace = "ops"
	if _, err := up.Run("cgo", ch, map[string]any{"replicas": 3}); err != nil {
		t.Fatalf("helm upgrade: %v", err)
	}
	var upgraded corev1.Secret
	must(t, c.Get(ctx, key, &upgraded))
	if !reflect.DeepEqual(upgraded.Data, installed.Data) {
		t.Errorf("helm upgrade replaced the metrics certificate the install generated")
	}
	var dep appsv1.Deployment
	must(t, c.Get(ctx, client.ObjectKey{Namespace: "ops", Name: "cgo-consumergroup-operator-controller-manager"}, &dep))
	if *dep.Spec.Replicas != 3 {
		t.Errorf("the upgrade left %d replicas, want 3: did it run?", *dep.Spec.Replicas)
	}
	// A render that cannot read the cluster (helm template) generates another: lookup is what kept it.
	objs := renderChart(t, nil, "ops")
	if s := chartCertSecret(t, objs, metricsService(t, objs)); reflect.DeepEqual(s.Data, installed.Data) {
		t.Errorf("a render without the cluster gave the installed certificate")
	}
}

// waitImage waits until the Deployment key exists and runs image.
func waitImage(t *testing.T, c client.Client, key client.ObjectKey, image string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var dep appsv1.Deployment
		err := c.Get(context.Background(), key, &dep)
		if err == nil && dep.Spec.Template.Spec.Containers[0].Image == image {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("Deployment %s: %v, want it to run %s", key, err, image)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// startAPIServer starts etcd and kube-apiserver for one test, and returns an admin client and a kubeconfig
// file for it.
func startAPIServer(t *testing.T) (client.Client, string) {
	t.Helper()
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		t.Fatal("KUBEBUILDER_ASSETS is not set: run make test, which builds the control plane")
	}
	env := &envtest.Environment{}
	cfg, err := env.Start()
	must(t, err)
	t.Cleanup(func() { _ = env.Stop() })
	c, err := client.New(cfg, client.Options{})
	must(t, err)
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	must(t, os.WriteFile(kubeconfig, env.KubeConfig, 0o600))
	return c, kubeconfig
}
