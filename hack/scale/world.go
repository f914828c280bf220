package main

import (
	"fmt"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/consumergroup-operator/consumergroup-operator/api/v1alpha1"
	"github.com/consumergroup-operator/consumergroup-operator/internal/testenv"
)

// world is every object a run creates, in the order it creates them.
type world struct {
	namespaces []string
	groups     []*v1alpha1.ConsumerGroup
	// pods[i] belongs to groups[i / podsPerGroup] and runs on nodes[i % len(nodes)].
	pods  []*corev1.Pod
	nodes []string
}

// nodeLeaseNamespace is where kubelets renew their nodes' Leases.
const nodeLeaseNamespace = "kube-node-lease"

// kubeletLeaseSeconds is a kubelet's node Lease duration; it renews every quarter of it.
const kubeletLeaseSeconds = 40

// layout is the world o asks for: groups of podsPerGroup pods, groupsPerNamespace groups to a namespace,
// each group's queues on two brokers, and the pods dealt out over nodes of podsPerNode in turn, as a
// scheduler spreads a Deployment's pods: a node lost takes one member or so from each of its groups, whose
// other members take its queues. Each group's topic is named after the group, so that a queue is one
// group's alone in the members' records.
func layout(o options) world {
	var w world
	groups := o.pods / o.podsPerGroup
	for g := range groups {
		if g%o.groupsPerNamespace == 0 {
			w.namespaces = append(w.namespaces, fmt.Sprintf("scale-%03d", g/o.groupsPerNamespace))
		}
		ns := w.namespaces[len(w.namespaces)-1]
		name := fmt.Sprintf("group-%05d", g)
		half := int32(o.queuesPerGroup / 2)
		w.groups = append(w.groups, testenv.Group(ns, name).
			Strategy(v1alpha1.Strategy{Type: v1alpha1.Sticky}).
			Handoff(v1alpha1.Handoff{Mode: v1alpha1.Cooperative}).
			Topic(ns+"-"+name, testenv.Broker("broker-a", half, ""), testenv.Broker("broker-b", half, "")).
			Obj())
	}
	nodes := (o.pods + o.podsPerNode - 1) / o.podsPerNode
	for n := range nodes {
		w.nodes = append(w.nodes, fmt.Sprintf("node-%05d", n))
	}
	for i := range o.pods {
		g := w.groups[i/o.podsPerGroup]
		p := testenv.Pod(g.Namespace, fmt.Sprintf("%s-%d", g.Name, i%o.podsPerGroup), g.Name).OnNode(w.nodes[i%nodes]).Obj()
		p.Spec.ServiceAccountName = memberServiceAccount // a token bound to the pod names its service account
		w.pods = append(w.pods, p)
	}
	return w
}

// nodeLease is a node's Lease as its kubelet keeps it.
func nodeLease(node string, now metav1.MicroTime) *coordinationv1.Lease {
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: nodeLeaseNamespace, Name: node},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity: ptr.To(node), LeaseDurationSeconds: ptr.To[int32](kubeletLeaseSeconds),
			AcquireTime: &now, RenewTime: &now,
		},
	}
}

// node is a node as a kubelet reports it, with the labels, conditions, addresses and image list that make
// a real Node object several kilobytes: the operator watches nodes for their zone, and what it keeps of
// them counts in its memory.
func node(name string, i int) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
		"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
		"node.kubernetes.io/instance-type": "m7i.2xlarge", corev1.LabelTopologyZone: fmt.Sprintf("zone-%d", i%3),
		corev1.LabelTopologyRegion: "region-1",
	}}}
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady", Message: "kubelet is posting ready status"}}
	for _, t := range []corev1.NodeConditionType{corev1.NodeMemoryPressure, corev1.NodeDiskPressure, corev1.NodePIDPressure} {
		n.Status.Conditions = append(n.Status.Conditions, corev1.NodeCondition{Type: t, Status: corev1.ConditionFalse, Reason: "KubeletHasSufficient" + string(t), Message: "kubelet has sufficient resources"})
	}
	n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&255)}, {Type: corev1.NodeHostName, Address: name}}
	n.Status.NodeInfo = corev1.NodeSystemInfo{KubeletVersion: "v1.37.2", ContainerRuntimeVersion: "containerd://2.1.4", OSImage: "Debian GNU/Linux 13 (trixie)", KernelVersion: "6.12.48", OperatingSystem: "linux", Architecture: "amd64"}
	for k := range 30 {
		digest := fmt.Sprintf("%064x", k*7919+1)
		n.Status.Images = append(n.Status.Images, corev1.ContainerImage{
			Names:     []string{fmt.Sprintf("registry.example.com/team-%d/service-%d@sha256:%s", k%7, k, digest), fmt.Sprintf("registry.example.com/team-%d/service-%d:v1.%d.0", k%7, k, k)},
			SizeBytes: int64(50+k) << 20,
		})
	}
	return n
}
