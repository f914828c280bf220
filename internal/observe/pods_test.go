package observe

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"

	"github.com/consumergroup-operator/consumergroup-operator/internal/fixture"
	"github.com/consumergroup-operator/consumergroup-operator/internal/plan"
)

// A cached pod keeps what membership, identity, zone, weight and the handoff read, and drops the rest:
// each rule that reads a pod gives the same answer on the cached pod as on the whole one.
func TestCachedPodKeepsWhatMembershipAndHandoffRead(t *testing.T) {
	full := fixture.Pod("a", fixture.OnNode("n1"), fixture.WithAnnotation("k", "v"), func(p *corev1.Pod) {
		p.Namespace = "ns"
		p.Labels = map[string]string{"app": "x"}
		p.Spec.Containers = []corev1.Container{{Name: "c", Image: "i"}}
		p.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "m"}}
		p.OwnerReferences = []metav1.OwnerReference{{Kind: "ReplicaSet", Name: "rs"}}
		p.Finalizers = []string{"f"}
		p.DeletionTimestamp = &metav1.Time{Time: time.Unix(5, 0)}
	})
	got := CachedPodOf(&full).Pod()
	if len(got.Spec.Containers) != 0 || got.ManagedFields != nil || got.OwnerReferences != nil || got.Finalizers != nil || len(got.Status.Conditions) != 1 {
		t.Errorf("cached pod still holds containers=%d managedFields=%v owners=%v finalizers=%v conditions=%v",
			len(got.Spec.Containers), got.ManagedFields, got.OwnerReferences, got.Finalizers, got.Status.Conditions)
	}
	if got.Name != "a" || got.Namespace != "ns" || got.Spec.NodeName != "n1" || got.Labels["app"] != "x" || got.Annotations["k"] != "v" ||
		got.DeletionTimestamp == nil || got.Status.Phase != corev1.PodRunning || got.UID != full.UID || len(got.Status.ContainerStatuses) != 1 {
		t.Errorf("cached pod lost a field membership or the handoff reads: %+v", got)
	}

	crashLooping := func(p *corev1.Pod) {
		p.Status.ContainerStatuses[0].State = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}}
		p.Status.ContainerStatuses[0].LastTerminationState = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1}}
		p.Status.ContainerStatuses[0].RestartCount = 4
	}
	withSidecar := func(p *corev1.Pod) {
		p.Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: "agent", RestartCount: 2, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}
	}
	noContainers := func(p *corev1.Pod) { p.Status.ContainerStatuses = nil }
	noReady := func(p *corev1.Pod) { p.Status.Conditions = p.Status.Conditions[:1] }
	succeeded := func(p *corev1.Pod) { p.Status.Phase = corev1.PodSucceeded }
	for _, pod := range []corev1.Pod{
		fixture.Pod("a"), fixture.Pod("a", fixture.NotReady), fixture.Pod("a", noReady), fixture.Pod("a", fixture.Stopped),
		fixture.Pod("a", crashLooping), fixture.Pod("a", withSidecar), fixture.Pod("a", withSidecar, fixture.Stopped),
		fixture.Pod("a", noContainers), fixture.Pod("a", succeeded),
	} {
		cached := CachedPodOf(&pod).Pod()
		if g, w := plan.IsRunningAndReady(&cached), plan.IsRunningAndReady(&pod); g != w {
			t.Errorf("pod %+v: IsRunningAndReady = %v once cached, %v before", pod.Status, g, w)
		}
		if g, w := plan.StoppedByKubelet(&cached), plan.StoppedByKubelet(&pod); g != w {
			t.Errorf("pod %+v: StoppedByKubelet = %v once cached, %v before", pod.Status, g, w)
		}
		if g, w := containerRestarts(&cached), containerRestarts(&pod); g != w {
			t.Errorf("pod %+v: %d restarts once cached, %d before", pod.Status, g, w)
		}
	}
}

// CachedPods reads a store of cached pods as the operator's informer keeps it: a namespace's pods by
// selector, a pod by name (NotFound when there is none), a node's pods; a copy each time, so that a pass
// cannot change the store.
func TestCachedPodsReadTheStore(t *testing.T) {
	synced := false
	pods := NewCachedPods()
	pods.Synced = func() bool { return synced }
	events := pods.Handler()
	add := func(ns, name, app, node string) *CachedPod {
		p := fixture.Pod(name, fixture.OnNode(node), func(p *corev1.Pod) { p.Namespace, p.Labels = ns, map[string]string{"app": app} })
		obj, err := CachePod(&p)
		if err != nil {
			t.Fatal(err)
		}
		events.OnAdd(obj, true)
		return obj.(*CachedPod)
	}
	add("ns", "a-0", "a", "n1")
	add("ns", "a-1", "a", "n2")
	add("ns", "b-0", "b", "n1")
	add("other", "a-0", "a", "n1")
	moved := add("ns", "c-0", "c", "n1")
	gone := add("ns", "d-0", "d", "n2")
	ctx := context.Background()
	if _, err := pods.ListPods(ctx, "ns", labels.Everything()); err == nil {
		t.Errorf("ListPods before the informer's first list is in: no error")
	}
	synced = true
	// An update that moves a pod to another node, a deletion, and one the informer missed the end of.
	update := *moved
	update.NodeName = "n3"
	events.OnUpdate(moved, &update)
	events.OnDelete(gone)
	events.OnDelete(toolscache.DeletedFinalStateUnknown{Key: "ns/c-0", Obj: &update})

	names := func(pods []corev1.Pod) []string {
		var out []string
		for _, p := range pods {
			out = append(out, p.Namespace+"/"+p.Name)
		}
		slices.Sort(out)
		return out
	}
	selected, err := pods.ListPods(ctx, "ns", labels.SelectorFromSet(labels.Set{"app": "a"}))
	if err != nil || !slices.Equal(names(selected), []string{"ns/a-0", "ns/a-1"}) {
		t.Errorf("ListPods(ns, app=a) = %v, %v; want ns/a-0 and ns/a-1", names(selected), err)
	}
	onN1, err := pods.LabelsOnNode("n1")
	if err != nil || !slices.Equal(labelSets(onN1), []string{"ns app=a", "ns app=b", "other app=a"}) {
		t.Errorf("LabelsOnNode(n1) = %v, %v; want ns app=a, ns app=b, other app=a", labelSets(onN1), err)
	}
	pod, err := pods.GetPod(ctx, types.NamespacedName{Namespace: "ns", Name: "b-0"})
	if err != nil || pod.Spec.NodeName != "n1" || pod.UID != "uid-b-0" || !plan.IsRunningAndReady(pod) {
		t.Errorf("GetPod(ns/b-0) = %+v, %v", pod, err)
	}
	pod.Labels["app"] = "changed"
	if again, _ := pods.GetPod(ctx, types.NamespacedName{Namespace: "ns", Name: "b-0"}); again.Labels["app"] != "b" {
		t.Errorf("a change to a pod read changed the store: label app=%q", again.Labels["app"])
	}
	if _, err := pods.GetPod(ctx, types.NamespacedName{Namespace: "ns", Name: "gone"}); !apierrors.IsNotFound(err) {
		t.Errorf("GetPod of a missing pod: %v, want NotFound", err)
	}
	if all, err := pods.ListPods(ctx, "ns", labels.Everything()); err != nil || !slices.Equal(names(all), []string{"ns/a-0", "ns/a-1", "ns/b-0"}) {
		t.Errorf("ListPods(ns) after the deletions = %v, %v; want ns/a-0, ns/a-1, ns/b-0", names(all), err)
	}
	events.OnAdd(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "stray"}}, false)
	if _, err := pods.ListPods(ctx, "ns", labels.Everything()); err == nil {
		t.Errorf("ListPods over a store that holds a ConfigMap: no error")
	}
}

// BenchmarkCachedPodMemory reports the heap one member pod costs in the cache, as a CachedPod and as the
// corev1.Pod stripped to the same facts that the cache held before:
//
//	go test ./internal/observe -run '^$' -bench CachedPodMemory -count 6
func BenchmarkCachedPodMemory(b *testing.B) {
	const n = 10000
	pod := func(i int) *corev1.Pod {
		p := fixture.Pod(fmt.Sprintf("group-%d-%d", i/10, i), fixture.OnNode(fmt.Sprintf("node-%d", i/30)), func(p *corev1.Pod) {
			p.Namespace = "scale-ns-1"
			p.UID = types.UID(fmt.Sprintf("7e1c6a3e-0000-4000-8000-%012d", i))
			p.ResourceVersion = "123456"
			p.Labels = map[string]string{"app": fmt.Sprintf("group-%d", i/10), "pod-template-hash": "abcdef"}
			p.CreationTimestamp = metav1.Now()
		})
		// Decoded, as the informer's pods are: each with its own copy of every string.
		data, err := json.Marshal(p)
		if err != nil {
			b.Fatal(err)
		}
		var decoded corev1.Pod
		if err := json.Unmarshal(data, &decoded); err != nil {
			b.Fatal(err)
		}
		return &decoded
	}
	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	var cachedBytes, strippedBytes float64
	for b.Loop() {
		cached, stripped := make([]*CachedPod, n), make([]*corev1.Pod, n)
		// Each whole pod is garbage once kept, as in the informer: what stays is what the cache holds.
		before := heap()
		for i := range cached {
			cached[i] = CachedPodOf(pod(i))
		}
		cachedBytes = float64(heap()-before) / n
		before = heap()
		for i, c := range cached {
			p := c.Pod()
			stripped[i] = &p
		}
		strippedBytes = float64(heap()-before) / n
		runtime.KeepAlive(cached)
		runtime.KeepAlive(stripped)
	}
	b.ReportMetric(cachedBytes, "B/cached-pod")
	b.ReportMetric(strippedBytes, "B/stripped-pod")
}

// BenchmarkListPodsOfAGroup lists one group's 10 pods from a namespace of 500 (50 groups), as a pass of
// the group does, and reports what it allocates:
//
//	go test ./internal/observe -run '^$' -bench ListPodsOfAGroup -benchmem -count 6
func BenchmarkListPodsOfAGroup(b *testing.B) {
	pods := NewCachedPods()
	pods.Synced = func() bool { return true }
	events := pods.Handler()
	for i := range 500 {
		p := fixture.Pod(fmt.Sprintf("group-%02d-%d", i/10, i%10), fixture.OnNode(fmt.Sprintf("node-%d", i%17)), func(p *corev1.Pod) {
			p.Namespace, p.Labels = "scale-000", map[string]string{"app": fmt.Sprintf("group-%02d", i/10)}
		})
		obj, err := CachePod(&p)
		if err != nil {
			b.Fatal(err)
		}
		events.OnAdd(obj, true)
	}
	selector := labels.SelectorFromSet(labels.Set{"app": "group-07"})
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		got, err := pods.ListPods(ctx, "scale-000", selector)
		if err != nil || len(got) != 10 {
			b.Fatalf("ListPods = %d pods, %v; want 10", len(got), err)
		}
	}
}

// labelSets is each of pods as its namespace and labels, sorted.
func labelSets(pods []PodLabels) []string {
	var out []string
	for _, p := range pods {
		out = append(out, p.Namespace+" "+labels.Set(p.Labels).String())
	}
	slices.Sort(out)
	return out
}

func TestLabelsOnNodeListsEachNamespacesLabelsOnce(t *testing.T) {
	pods := NewCachedPods()
	pods.Synced = func() bool { return true }
	big := strings.Repeat("v", maxSharedMapBytes)
	for _, p := range []struct {
		ns, name, node string
		labels         map[string]string
	}{
		{"ns", "a-0", "n1", map[string]string{"app": "a", "pod-template-hash": "7d4f"}},
		{"ns", "a-1", "n1", map[string]string{"pod-template-hash": "7d4f", "app": "a"}},
		{"ns", "a-2", "n2", map[string]string{"app": "a", "pod-template-hash": "7d4f"}},
		{"ns", "s-0", "n1", map[string]string{"app": "s", "statefulset.kubernetes.io/pod-name": "s-0"}},
		{"ns", "s-1", "n1", map[string]string{"app": "s", "statefulset.kubernetes.io/pod-name": "s-1"}},
		{"other", "a-0", "n1", map[string]string{"app": "a", "pod-template-hash": "7d4f"}},
		{"ns", "bare-0", "n1", nil},
		{"ns", "bare-1", "n1", nil},
		// Labels too large to compare by key are each listed.
		{"ns", "big-0", "n1", map[string]string{"big": big}},
		{"ns", "big-1", "n1", map[string]string{"big": big}},
	} {
		pod := fixture.Pod(p.name, fixture.OnNode(p.node), func(pod *corev1.Pod) { pod.Namespace, pod.Labels = p.ns, p.labels })
		obj, err := CachePod(&pod)
		if err != nil {
			t.Fatal(err)
		}
		pods.Handler().OnAdd(obj, true)
	}
	got, err := pods.LabelsOnNode("n1")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"ns ", "ns app=a,pod-template-hash=7d4f", "ns app=s,statefulset.kubernetes.io/pod-name=s-0",
		"ns app=s,statefulset.kubernetes.io/pod-name=s-1", "ns big=" + big, "ns big=" + big, "other app=a,pod-template-hash=7d4f"}
	if !slices.Equal(labelSets(got), want) {
		t.Errorf("LabelsOnNode(n1) = %q, want %q", labelSets(got), want)
	}
	if got, err := pods.LabelsOnNode("none"); err != nil || len(got) != 0 {
		t.Errorf("LabelsOnNode(none) = %v, %v; want nothing", got, err)
	}
}
