//go:build envtest

// Package config holds the operator's manifests. Its test proves them against a real API server: every
// sample ConsumerGroup and ClusterNameServer is accepted by the CRDs' schemas and CEL rules, the samples
// cover every strategy, and the RBAC, Deployment and NetworkPolicy manifests are valid objects without
// unknown fields.
package config

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/consumergroup-operator/consumergroup-operator/internal/testenv"
)

// One API server for the package's tests.
var k8s client.Client

func TestMain(m *testing.M) {
	testenv.Main(m, []string{filepath.Join("crd", "bases")}, func(_ *envtest.Environment, cfg *rest.Config) error {
		// Unstructured objects only: the test reads the manifests as a user's kubectl would, without the
		// operator's Go types filling in or dropping fields.
		var err error
		k8s, err = client.New(cfg, client.Options{})
		return err
	})
}

// dryRunCreate creates obj in namespace without storing it. Strict field validation makes an unknown or
// misspelt field an error instead of a silently dropped one.
func dryRunCreate(obj *unstructured.Unstructured, namespace string) error {
	if namespace != "" && obj.GetNamespace() == "" {
		obj.SetNamespace(namespace)
	}
	return k8s.Create(context.Background(), obj, client.DryRunAll, client.FieldValidation(metav1.FieldValidationStrict))
}

// readObjects reads every object of a multi-document YAML file.
func readObjects(t *testing.T, path string) []*unstructured.Unstructured {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var objs []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	for {
		obj := &unstructured.Unstructured{}
		if err := dec.Decode(&obj.Object); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if len(obj.Object) > 0 {
			objs = append(objs, obj)
		}
	}
	if len(objs) == 0 {
		t.Fatalf("%s holds no object", path)
	}
	return objs
}

// kustomization is the part of a kustomization.yaml the test checks.
type kustomization struct {
	Resources []string `json:"resources"`
	Patches   []struct {
		Path string `json:"path"`
	} `json:"patches"`
	Configurations []string `json:"configurations"`
}

// files are the files and folders k names.
func (k kustomization) files() []string {
	files := slices.Concat(k.Resources, k.Configurations)
	for _, p := range k.Patches {
		if p.Path != "" {
			files = append(files, p.Path)
		}
	}
	return files
}

func readKustomization(t *testing.T, dir string) kustomization {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var k kustomization
	if err := utilyaml.Unmarshal(data, &k); err != nil {
		t.Fatalf("%s/kustomization.yaml: %v", dir, err)
	}
	return k
}

func sampleFiles(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("samples", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	files = slices.DeleteFunc(files, func(f string) bool { return filepath.Base(f) == "kustomization.yaml" })
	if len(files) == 0 {
		t.Fatal("config/samples holds no sample")
	}
	return files
}

// TestSamplesAreAccepted creates every sample, as the API server would on kubectl apply, and fails on the
// first schema or CEL error.
func TestSamplesAreAccepted(t *testing.T) {
	for _, file := range sampleFiles(t) {
		t.Run(filepath.Base(file), func(t *testing.T) {
			for _, obj := range readObjects(t, file) {
				namespace := "default"
				switch obj.GetKind() {
				case "ConsumerGroup":
				case "ClusterNameServer":
					namespace = "" // cluster-scoped
				default:
					t.Fatalf("%s holds a %s; samples are ConsumerGroups and ClusterNameServers", file, obj.GetKind())
				}
				if err := dryRunCreate(obj, namespace); err != nil {
					t.Fatalf("the API server refused %s: %v", obj.GetName(), err)
				}
			}
		})
	}
}

// TestDemoWorkloadsAreAccepted creates the demo's workloads (config/samples/demo: the Deployment the demo
// runs, the StatefulSet sample and its group) as kubectl apply would, with strict field validation.
func TestDemoWorkloadsAreAccepted(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("samples", "demo", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("config/samples/demo holds no workload (%v)", err)
	}
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			objs := readObjects(t, file)
			if len(objs) == 0 {
				t.Fatalf("%s holds no object", file)
			}
			for _, obj := range objs {
				if err := dryRunCreate(obj, "default"); err != nil {
					t.Fatalf("the API server refused %s %s: %v", obj.GetKind(), obj.GetName(), err)
				}
			}
		})
	}
}

// TestSamplesCoverEveryStrategy reads the strategy types from the installed CRD, so that a new strategy
// without a sample fails here, and wants a Broadcasting sample too.
func TestSamplesCoverEveryStrategy(t *testing.T) {
	crd := readObjects(t, filepath.Join("crd", "bases", "messaging.consumergroup.io_consumergroups.yaml"))[0]
	versions, _, _ := unstructured.NestedSlice(crd.Object, "spec", "versions")
	if len(versions) == 0 {
		t.Fatal("the CRD has no version")
	}
	enum, _, err := unstructured.NestedSlice(versions[0].(map[string]any), "schema", "openAPIV3Schema",
		"properties", "spec", "properties", "strategy", "properties", "type", "enum")
	if err != nil {
		t.Fatal(err)
	}
	var strategies []string
	for _, v := range enum {
		strategies = append(strategies, fmt.Sprint(v))
	}
	if len(strategies) == 0 {
		t.Fatal("the CRD lists no strategy type in spec.strategy.type's enum")
	}

	covered := map[string][]string{}
	broadcasting := false
	for _, file := range sampleFiles(t) {
		for _, obj := range readObjects(t, file) {
			if obj.GetKind() != "ConsumerGroup" {
				continue
			}
			if model, _, _ := unstructured.NestedString(obj.Object, "spec", "messageModel"); model == "Broadcasting" {
				broadcasting = true
				continue
			}
			typ, _, _ := unstructured.NestedString(obj.Object, "spec", "strategy", "type")
			covered[typ] = append(covered[typ], file)
		}
	}
	for _, s := range strategies {
		if len(covered[s]) == 0 {
			t.Errorf("no Clustering sample in config/samples uses strategy %s", s)
		}
	}
	if !broadcasting {
		t.Error("no sample in config/samples uses messageModel Broadcasting")
	}
}

// TestInvalidSampleIsRefused shows that the dry runs above do validate: a sample made invalid on purpose
// (ByConfig with Broadcasting, which a CEL rule forbids) is refused.
func TestInvalidSampleIsRefused(t *testing.T) {
	obj := readObjects(t, filepath.Join("samples", "messaging_v1alpha1_consumergroup_byconfig.yaml"))[0]
	if err := unstructured.SetNestedField(obj.Object, "Broadcasting", "spec", "messageModel"); err != nil {
		t.Fatal(err)
	}
	err := dryRunCreate(obj, "default")
	if !apierrors.IsInvalid(err) {
		t.Fatalf("want the API server to refuse ByConfig with Broadcasting as invalid, got %v", err)
	}

	obj = readObjects(t, filepath.Join("samples", "messaging_v1alpha1_consumergroup_sticky.yaml"))[0]
	if err := unstructured.SetNestedField(obj.Object, int64(1), "spec", "strategy", "sticky", "maxSkw"); err != nil {
		t.Fatal(err)
	}
	if err := dryRunCreate(obj, "default"); err == nil || !strings.Contains(err.Error(), "maxSkw") {
		t.Fatalf("want strict field validation to refuse the unknown field maxSkw, got %v", err)
	}
}

// TestSamplesNameClusterNameServersOfTheSamples: a sample group that names a ClusterNameServer names one
// of the samples, so that applying both shows a group that may read its routes.
func TestSamplesNameClusterNameServersOfTheSamples(t *testing.T) {
	cluster := map[string]bool{}
	var naming []*unstructured.Unstructured
	for _, file := range sampleFiles(t) {
		for _, obj := range readObjects(t, file) {
			if obj.GetKind() == "ClusterNameServer" {
				cluster[obj.GetName()] = true
			}
			if _, found, _ := unstructured.NestedString(obj.Object, "spec", "nameServer", "clusterNameServer"); found {
				naming = append(naming, obj)
			}
		}
	}
	if len(naming) == 0 {
		t.Fatal("no sample group names a ClusterNameServer")
	}
	for _, obj := range naming {
		name, _, _ := unstructured.NestedString(obj.Object, "spec", "nameServer", "clusterNameServer")
		if !cluster[name] {
			t.Errorf("sample group %s names ClusterNameServer %s, which no sample is", obj.GetName(), name)
		}
	}
}

// samplesLeftOut are the samples kubectl apply -k config/samples does not apply, each with why.
var samplesLeftOut = map[string]string{
	"messaging_v1alpha1_consumergroup_nameserver.yaml": "it reads RocketMQ name servers, which the local demo has not",
}

// TestKustomizationsListExistingFiles checks that every kustomization's resources, patches and
// configurations exist, so that kubectl apply -k never fails on a missing file.
func TestKustomizationsListExistingFiles(t *testing.T) {
	for _, dir := range []string{"crd", "rbac", "manager", "admission", "default", "networkpolicy", "certmanager", "nodeagent", "samples"} {
		k := readKustomization(t, dir)
		if len(k.Resources) == 0 {
			t.Errorf("%s/kustomization.yaml lists no resources", dir)
		}
		for _, r := range k.files() {
			if _, err := os.Stat(filepath.Join(dir, r)); err != nil {
				t.Errorf("%s/kustomization.yaml: %v", dir, err)
			}
		}
	}
	samples := readKustomization(t, "samples").Resources
	for _, file := range sampleFiles(t) {
		if _, left := samplesLeftOut[filepath.Base(file)]; left {
			if slices.Contains(samples, filepath.Base(file)) {
				t.Errorf("samples/kustomization.yaml lists %s, which samplesLeftOut says it leaves out", filepath.Base(file))
			}
			continue
		}
		if !slices.Contains(samples, filepath.Base(file)) {
			t.Errorf("samples/kustomization.yaml does not list %s", filepath.Base(file))
		}
	}
}

// TestDeploymentManifestsAreValid creates the RBAC objects and the Deployment, as config/default installs
// them (namespace consumergroup-system), the opt-in NetworkPolicy, and the opt-in node agent's objects
// (config/nodeagent), with strict field validation.
func TestDeploymentManifestsAreValid(t *testing.T) {
	const namespace = "consumergroup-system"
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}
	if err := k8s.Create(context.Background(), ns); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	files := []string{filepath.Join("manager", "manager.yaml")}
	for _, dir := range []string{"rbac", "networkpolicy", "nodeagent"} {
		for _, r := range readKustomization(t, dir).Resources {
			files = append(files, filepath.Join(dir, r))
		}
	}
	for _, file := range files {
		for _, obj := range readObjects(t, file) {
			if obj.GetKind() == "Namespace" {
				continue
			}
			// kustomize sets the namespace of namespaced objects and of ServiceAccount subjects.
			if obj.GetNamespace() != "" {
				obj.SetNamespace(namespace)
			}
			subjects, _, _ := unstructured.NestedSlice(obj.Object, "subjects")
			for _, s := range subjects {
				s.(map[string]any)["namespace"] = namespace
			}
			if len(subjects) > 0 {
				if err := unstructured.SetNestedSlice(obj.Object, subjects, "subjects"); err != nil {
					t.Fatal(err)
				}
			}
			if err := dryRunCreate(obj, ""); err != nil {
				t.Errorf("%s: the API server refused %s %s: %v", file, obj.GetKind(), obj.GetName(), err)
			}
		}
	}
}
