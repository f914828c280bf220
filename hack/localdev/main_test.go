//go:build envtest

package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/consumergroup-operator/consumergroup-operator/api/v1alpha1"
	"github.com/consumergroup-operator/consumergroup-operator/internal/manager"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/allocate"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/protocol"
)

// TestDemo runs what `make run` runs without a cluster, and does what the README tells the reader to do:
// scale the pods to five and to two with hack/scale.sh. After each step every pod must hold its share of
// the sample's 12 queues, each queue exactly once; at the end the demo must stop cleanly.
func TestDemo(t *testing.T) {
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	if assets == "" {
		t.Fatal("KUBEBUILDER_ASSETS is not set: run the tests with `make test`, which builds etcd and kube-apiserver (hack/envtest-bins.sh) and sets it")
	}
	assets, err := filepath.Abs(assets)
	if err != nil {
		t.Fatal(err)
	}
	// The demo reads config/ and runs hack/scale.sh from the repository's root, as make run does.
	t.Chdir(filepath.Join("..", ".."))
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, assets, filepath.Join("config", "samples", "messaging_v1alpha1_consumergroup_sticky.yaml"), "demo", 3, dir)
	}()

	var c client.Client
	waitFor(t, done, "the demo's kubeconfig", func() error {
		cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
		if err != nil {
			return err
		}
		c, err = client.New(cfg, client.Options{Scheme: manager.Scheme()})
		return err
	})
	expectMembers(t, done, c, 3)

	for _, n := range []int{5, 2} {
		scale := exec.Command("hack/scale.sh", fmt.Sprint(n))
		scale.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig, "KUBECTL="+filepath.Join(assets, "kubectl"))
		if out, err := scale.CombinedOutput(); err != nil {
			t.Fatalf("hack/scale.sh %d: %v\n%s", n, err, out)
		}
		expectMembers(t, done, c, n)
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("the demo stopped with an error: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("the demo did not stop within a minute of being interrupted")
	}
	if _, err := os.Stat(kubeconfig); !os.IsNotExist(err) {
		t.Errorf("the demo left its kubeconfig behind (stat: %v); it names a server that is gone", err)
	}
}

// expectMembers waits until exactly pods order-consumer-0..n-1 exist and are members, the ConfigMap gives
// each of the group's 12 queues to exactly one of them, and the group reports it Ready.
func expectMembers(t *testing.T, done <-chan error, c client.Client, n int) {
	t.Helper()
	var want []string
	for i := range n {
		want = append(want, fmt.Sprintf("order-consumer-%d", i))
	}
	waitFor(t, done, fmt.Sprintf("%d members holding the 12 queues", n), func() error {
		var pods corev1.PodList
		if err := c.List(context.Background(), &pods, client.InNamespace("demo")); err != nil {
			return err
		}
		var names []string
		for _, p := range pods.Items {
			names = append(names, p.Name)
		}
		slices.Sort(names)
		if !slices.Equal(names, want) {
			return fmt.Errorf("pods %v", names)
		}

		var cm corev1.ConfigMap
		if err := c.Get(context.Background(), client.ObjectKey{Namespace: "demo", Name: "orders-assignment"}, &cm); err != nil {
			return err
		}
		var keys []string
		owner := map[allocate.Queue]string{}
		for pod, value := range cm.Data {
			keys = append(keys, pod)
			_, queues, err := protocol.DecodeEntry([]byte(value))
			if err != nil {
				return fmt.Errorf("entry of %s: %w", pod, err)
			}
			for _, q := range queues {
				if other, taken := owner[q]; taken {
					return fmt.Errorf("%s is given to both %s and %s", q, other, pod)
				}
				owner[q] = pod
			}
		}
		slices.Sort(keys)
		if !slices.Equal(keys, want) {
			return fmt.Errorf("ConfigMap keys %v", keys)
		}
		if len(owner) != 12 {
			return fmt.Errorf("%d of the 12 queues have an owner", len(owner))
		}

		var group v1alpha1.ConsumerGroup
		if err := c.Get(context.Background(), client.ObjectKey{Namespace: "demo", Name: "orders"}, &group); err != nil {
			return err
		}
		if !meta.IsStatusConditionTrue(group.Status.Conditions, "Ready") || group.Status.MemberCount != int32(n) {
			return fmt.Errorf("group status: %d members, conditions %v", group.Status.MemberCount, group.Status.Conditions)
		}
		return nil
	})
}

// waitFor retries check until it succeeds, for up to a minute (the control plane shares two cores with
// the rest of the test run); it fails at once if the demo stopped.
func waitFor(t *testing.T, done <-chan error, what string, check func() error) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		err := check()
		if err == nil {
			return
		}
		select {
		case runErr := <-done:
			t.Fatalf("the demo stopped (%v) while waiting for %s; last check: %v", runErr, what, err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %s: %v", what, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
