package observe

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// CachedPod is what the operator's cache keeps of a pod: what membership, identity, zone, weight and the
// handoff read, and nothing else. An operator that watches every pod of a cluster holds one for each, and
// a corev1.Pod stripped to the same facts still costs about 2.1 KB, most of it the empty structs of its
// spec and status; a CachedPod of the same pod costs about a third of that (BenchmarkCachedPodMemory).
// Pod gives a pass the corev1.Pod the plan reads.
type CachedPod struct {
	metav1.TypeMeta
	// ObjectMeta keeps the name, namespace, UID, resourceVersion, labels, annotations and the creation
	// and deletion times: owners, finalizers and managed fields are read by nobody here.
	metav1.ObjectMeta
	NodeName string
	Phase    corev1.PodPhase
	// Ready is the status of the pod's Ready condition; empty when it has none.
	Ready corev1.ConditionStatus
	// Containers and InitContainers are the containers' states, in the status's order.
	Containers, InitContainers []CachedContainer
}

// CachedContainer is what the kubelet says of one container: how often it restarted it, whether it runs,
// and whether it has terminated now or before.
type CachedContainer struct {
	RestartCount                        int32
	Running, Terminated, LastTerminated bool
}

// CachedPodOf keeps of pod what a CachedPod holds.
func CachedPodOf(pod *corev1.Pod) *CachedPod {
	c := &CachedPod{
		TypeMeta: metav1.TypeMeta{APIVersion: Intern(pod.APIVersion), Kind: Intern(pod.Kind)},
		ObjectMeta: metav1.ObjectMeta{
			Name: pod.Name, Namespace: Intern(pod.Namespace), UID: pod.UID, ResourceVersion: pod.ResourceVersion,
			Labels: SharedMap(pod.Labels), Annotations: SharedMap(pod.Annotations),
			CreationTimestamp: pod.CreationTimestamp, DeletionTimestamp: pod.DeletionTimestamp,
		},
		NodeName:       Intern(pod.Spec.NodeName),
		Phase:          corev1.PodPhase(Intern(string(pod.Status.Phase))),
		Containers:     cachedContainers(pod.Status.ContainerStatuses),
		InitContainers: cachedContainers(pod.Status.InitContainerStatuses),
	}
	for _, cond := range pod.Status.Conditions {
		if cond.Type == corev1.PodReady {
			c.Ready = corev1.ConditionStatus(Intern(string(cond.Status)))
		}
	}
	return c
}

func cachedContainers(statuses []corev1.ContainerStatus) []CachedContainer {
	if len(statuses) == 0 {
		return nil
	}
	out := make([]CachedContainer, len(statuses))
	for i, s := range statuses {
		out[i] = CachedContainer{RestartCount: s.RestartCount, Running: s.State.Running != nil, Terminated: s.State.Terminated != nil,
			LastTerminated: s.LastTerminationState.Terminated != nil}
	}
	return out
}

// CachePod is the cache transform of pods: it stores a CachedPod in place of each pod.
func CachePod(obj any) (any, error) {
	if pod, ok := obj.(*corev1.Pod); ok {
		return CachedPodOf(pod), nil
	}
	return obj, nil
}

// Pod is the corev1.Pod of the facts c keeps, with its own copy of them.
func (c *CachedPod) Pod() corev1.Pod {
	pod := corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: *c.ObjectMeta.DeepCopy(),
		Spec:       corev1.PodSpec{NodeName: c.NodeName},
		Status: corev1.PodStatus{
			Phase:                 c.Phase,
			ContainerStatuses:     containerStatuses(c.Containers),
			InitContainerStatuses: containerStatuses(c.InitContainers),
		},
	}
	if c.Ready != "" {
		pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: c.Ready}}
	}
	return pod
}

func containerStatuses(containers []CachedContainer) []corev1.ContainerStatus {
	if len(containers) == 0 {
		return nil
	}
	out := make([]corev1.ContainerStatus, len(containers))
	for i, c := range containers {
		out[i].RestartCount = c.RestartCount
		if c.Running {
			out[i].State.Running = &corev1.ContainerStateRunning{}
		}
		if c.Terminated {
			out[i].State.Terminated = &corev1.ContainerStateTerminated{}
		}
		if c.LastTerminated {
			out[i].LastTerminationState.Terminated = &corev1.ContainerStateTerminated{}
		}
	}
	return out
}

// DeepCopyObject makes CachedPod a runtime.Object, as an informer's store and its event handlers need.
func (c *CachedPod) DeepCopyObject() runtime.Object {
	out := *c
	out.ObjectMeta = *c.ObjectMeta.DeepCopy()
	out.Containers = append([]CachedContainer(nil), c.Containers...)
	out.InitContainers = append([]CachedContainer(nil), c.InitContainers...)
	return &out
}

// PodReader reads the pods a pass needs: the operator's from its cache of CachedPods (CachedPods), a
// command line tool's from the API server (ReaderPods).
type PodReader interface {
	// ListPods is the pods of namespace that selector matches.
	ListPods(ctx context.Context, namespace string, selector labels.Selector) ([]corev1.Pod, error)
	// GetPod is the pod named key, or an error that apierrors.IsNotFound recognises when there is none.
	GetPod(ctx context.Context, key types.NamespacedName) (*corev1.Pod, error)
}

// ReaderPods reads pods through a client.Reader.
type ReaderPods struct{ Reader client.Reader }

func (r ReaderPods) ListPods(ctx context.Context, namespace string, selector labels.Selector) ([]corev1.Pod, error) {
	var pods corev1.PodList
	if err := r.Reader.List(ctx, &pods, client.InNamespace(namespace), client.MatchingLabelsSelector{Selector: selector}); err != nil {
		return nil, err
	}
	return pods.Items, nil
}

func (r ReaderPods) GetPod(ctx context.Context, key types.NamespacedName) (*corev1.Pod, error) {
	var pod corev1.Pod
	if err := r.Reader.Get(ctx, key, &pod); err != nil {
		return nil, err
	}
	return &pod, nil
}

// CachedPods reads the pods of a store of CachedPods (and, should one be there, whole pods), a pod
// informer's own indexer (controllers' podSource), through its namespace index (toolscache.NamespaceIndex),
// and finds a node's pods through PodNodeIndex (PodIndexers). Until Synced says the store holds the
// informer's first list, every read fails: a pass that saw only some of the pods would take the others'
// queues away.
type CachedPods struct {
	Indexer toolscache.Indexer
	Synced  func() bool
}

// PodIndexers are the indexes a pod informer's indexer needs beyond its namespace index (which
// controller-runtime's informers have) for CachedPods to read it: PodNodeIndex.
func PodIndexers() toolscache.Indexers {
	return toolscache.Indexers{PodNodeIndex: PodNodeIndexFunc}
}

// NewCachedPods is a store of pods of its own, for an informer's handler to feed through Handler: it
// holds the informer's objects, adding its own keys and indexes. Where the informer's own indexer can be
// read, read it (controllers' podSource). The handler that feeds this store must be the one that queues
// the passes that read it, and feed it first: a pass queued by another handler of the same informer
// could read the store before it has the change.
func NewCachedPods() CachedPods {
	indexers := PodIndexers()
	indexers[toolscache.NamespaceIndex] = toolscache.MetaNamespaceIndexFunc
	return CachedPods{Indexer: toolscache.NewIndexer(toolscache.DeletionHandlingMetaNamespaceKeyFunc, indexers)}
}

// Handler keeps the store as the informer's events say. The store's index functions cannot fail on an
// object the informer's key function accepted, so their errors are not returned anywhere.
func (c CachedPods) Handler() toolscache.ResourceEventHandler {
	return toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { _ = c.Indexer.Add(obj) },
		UpdateFunc: func(_, obj any) { _ = c.Indexer.Update(obj) },
		DeleteFunc: func(obj any) { _ = c.Indexer.Delete(obj) },
	}
}

// errPodsNotSynced is what reads return before the store holds the informer's first list.
var errPodsNotSynced = errors.New("the pod cache has not yet synced")

func (c CachedPods) synced() error {
	if c.Synced != nil && !c.Synced() {
		return errPodsNotSynced
	}
	return nil
}

// PodNodeIndex is the name of the index of pods by the node they run on.
const PodNodeIndex = "spec.nodeName"

// PodNodeIndexFunc indexes a cached pod by its node's name.
func PodNodeIndexFunc(obj any) ([]string, error) {
	switch p := obj.(type) {
	case *CachedPod:
		if p.NodeName != "" {
			return []string{p.NodeName}, nil
		}
	case *corev1.Pod:
		if p.Spec.NodeName != "" {
			return []string{p.Spec.NodeName}, nil
		}
	}
	return nil, nil
}

func (c CachedPods) ListPods(_ context.Context, namespace string, selector labels.Selector) ([]corev1.Pod, error) {
	if err := c.synced(); err != nil {
		return nil, err
	}
	objs, err := c.Indexer.ByIndex(toolscache.NamespaceIndex, namespace)
	if err != nil {
		return nil, err
	}
	return podsOf(objs, selector)
}

// PodLabels is the labels of some pods of one namespace.
type PodLabels struct {
	Namespace string
	Labels    map[string]string
}

// LabelsOnNode is the namespaces and labels of the cached pods that run on node, each pair once: which
// groups have pods on a node depends on nothing else, and the pods of one ReplicaSet share their labels.
// The maps are the cache's: read them only. A node's groups are looked up when its kubelet or agent is
// late and when it renews again; copying each of its pods into a corev1.Pod and looking up each one's
// groups was, in a 20,000-pod run whose nodes were seen late again and again, most of what the operator
// allocated.
func (c CachedPods) LabelsOnNode(node string) ([]PodLabels, error) {
	if err := c.synced(); err != nil {
		return nil, err
	}
	objs, err := c.Indexer.ByIndex(PodNodeIndex, node)
	if err != nil {
		return nil, err
	}
	type labelSet struct{ namespace, labels string }
	seen := map[labelSet]bool{}
	var out []PodLabels
	for _, obj := range objs {
		pod, err := labelsOf(obj)
		if err != nil {
			return nil, err
		}
		// Labels too large for a key are not compared: their pods are each looked up.
		if key, ok := mapKey(pod.Labels); ok {
			if seen[labelSet{pod.Namespace, key}] {
				continue
			}
			seen[labelSet{pod.Namespace, key}] = true
		}
		out = append(out, pod)
	}
	return out, nil
}

func (c CachedPods) GetPod(_ context.Context, key types.NamespacedName) (*corev1.Pod, error) {
	if err := c.synced(); err != nil {
		return nil, err
	}
	obj, ok, err := c.Indexer.GetByKey(key.String())
	switch {
	case err != nil:
		return nil, err
	case !ok:
		return nil, apierrors.NewNotFound(corev1.Resource("pods"), key.Name)
	}
	pods, err := podsOf([]any{obj}, labels.Everything())
	if err != nil {
		return nil, err
	}
	return &pods[0], nil
}

// labelsOf is the namespace and labels of a pod the store holds, a CachedPod or a corev1.Pod.
func labelsOf(obj any) (PodLabels, error) {
	switch p := obj.(type) {
	case *CachedPod:
		return PodLabels{Namespace: p.Namespace, Labels: p.Labels}, nil
	case *corev1.Pod:
		return PodLabels{Namespace: p.Namespace, Labels: p.Labels}, nil
	}
	return PodLabels{}, fmt.Errorf("the pod cache holds a %T", obj)
}

// podsOf is the pods of objs that selector matches, sorted as the store returned them. objs is often a
// whole namespace's pods and the selector one group's, a few of hundreds: the result is made for what
// matches, not for all of objs, which cost every pass of a group some hundreds of kilobytes of pods that
// were never filled (BenchmarkListPodsOfAGroup).
func podsOf(objs []any, selector labels.Selector) ([]corev1.Pod, error) {
	var matched []any
	for _, obj := range objs {
		pod, err := labelsOf(obj)
		if err != nil {
			return nil, err
		}
		if selector.Matches(labels.Set(pod.Labels)) {
			matched = append(matched, obj)
		}
	}
	pods := make([]corev1.Pod, len(matched))
	for i, obj := range matched {
		switch p := obj.(type) {
		case *CachedPod:
			pods[i] = p.Pod()
		case *corev1.Pod:
			pods[i] = *p.DeepCopy()
		}
	}
	return pods, nil
}
