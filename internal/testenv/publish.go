package testenv

import (
	"context"
	"strconv"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/consumergroup-operator/consumergroup-operator/pkg/protocol"
)

// PodQueues is one pod incarnation's entry: the pod's UID and its queues.
type PodQueues struct {
	UID    types.UID
	Queues []protocol.Queue
}

// Assignment is a group's assignment as Publish writes it, in place of an operator, for tests of the pod
// side.
type Assignment struct {
	Namespace, Group string
	// GroupUID names the group as the ConfigMaps' controller, as the operator does; a new UID is a group
	// deleted and created again.
	GroupUID   types.UID
	Generation int64
	// Entries are the pods' entries, by pod name.
	Entries map[string]PodQueues
	// Shards, when above 1, spreads the entries over that many shard ConfigMaps, as the operator does for
	// an assignment too large for one.
	Shards int
}

// Publish writes a as the operator would: the entries, the generation, the digests, shards first and the
// assignment ConfigMap last.
func Publish(t testing.TB, cs kubernetes.Interface, a Assignment) {
	t.Helper()
	data := map[string]string{}
	for pod, e := range a.Entries {
		data[pod] = string(protocol.NewEntry(pod, string(e.UID), a.Generation, e.Queues).Encode())
	}
	parts, err := protocol.Layout(a.Group, a.Generation, data, nil)
	if err != nil {
		t.Fatal(err)
	}
	if a.Shards > 1 {
		parts = shardedParts(a.Group, a.Generation, data, a.Shards)
	}
	for _, p := range parts {
		writeConfigMap(t, cs, a, p)
	}
}

// shardedParts lays data out over shards ConfigMaps, however small it is.
func shardedParts(group string, generation int64, data map[string]string, shards int) []protocol.Part {
	gen := strconv.FormatInt(generation, 10)
	parts := make([]protocol.Part, shards)
	for k := range parts {
		parts[k] = protocol.Part{Name: protocol.ShardName(group, k), Data: map[string]string{}, Annotations: map[string]string{protocol.GenerationAnnotation: gen}}
	}
	for pod, value := range data {
		parts[protocol.ShardOf(pod, shards)].Data[pod] = value
	}
	parts = append(parts, protocol.Part{Name: protocol.AssignmentName(group), Data: map[string]string{},
		Annotations: map[string]string{protocol.GenerationAnnotation: gen, protocol.ShardsAnnotation: strconv.Itoa(shards)}})
	for i := range parts {
		parts[i].Annotations[protocol.DigestAnnotation] = protocol.Digest(parts[i].Name, parts[i].Annotations, parts[i].Data)
	}
	return parts
}

func writeConfigMap(t testing.TB, cs kubernetes.Interface, a Assignment, p protocol.Part) {
	t.Helper()
	ctx := context.Background()
	configMaps := cs.CoreV1().ConfigMaps(a.Namespace)
	cm, err := configMaps.Get(ctx, p.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		cm, err = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: a.Namespace}}, nil
	}
	if err != nil {
		t.Fatalf("reading ConfigMap %s: %v", p.Name, err)
	}
	cm.Labels = map[string]string{protocol.GroupLabel: a.Group, protocol.ManagedByLabel: protocol.ManagedByValue}
	cm.Annotations, cm.Data = p.Annotations, p.Data
	cm.OwnerReferences = nil
	if a.GroupUID != "" {
		cm.OwnerReferences = []metav1.OwnerReference{{APIVersion: protocol.GroupAPIVersion, Kind: protocol.GroupKind,
			Name: a.Group, UID: a.GroupUID, Controller: ptr.To(true)}}
	}
	if cm.ResourceVersion == "" {
		_, err = configMaps.Create(ctx, cm, metav1.CreateOptions{})
	} else {
		_, err = configMaps.Update(ctx, cm, metav1.UpdateOptions{})
	}
	if err != nil {
		t.Fatalf("writing ConfigMap %s: %v", p.Name, err)
	}
}
