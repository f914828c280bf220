//go:build envtest

// Package admission holds the admission policies that confine consumer pods, and the one that keeps a
// ConsumerGroup from naming a Secret its writer may not read (kustomize resources, no Go code). Its test
// proves them against a real kube-apiserver, with tokens bound to pods as a kubelet mounts them and a
// tenant user impersonated: every write it refuses is first shown to go through without the policies,
// with the same RBAC, so each refusal is the policies' doing.
package admission

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	"github.com/consumergroup-operator/consumergroup-operator/api/v1alpha1"
	"github.com/consumergroup-operator/consumergroup-operator/internal/testenv"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/nodeagent"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/protocol"
)

// The API server of the package's tests, and admin clients of it: admin for Kubernetes' own kinds,
// adminGroups for ConsumerGroups.
var (
	restConfig  *rest.Config
	admin       kubernetes.Interface
	adminGroups client.Client
	groupScheme = runtime.NewScheme()
)

func TestMain(m *testing.M) {
	// The ConsumerGroup CRD, for the nameserver-credentials policy.
	testenv.Main(m, []string{filepath.Join("..", "crd", "bases")}, func(_ *envtest.Environment, cfg *rest.Config) error {
		restConfig = cfg
		// The long pod name draws a warning (a pod's name is its hostname) on every create.
		quiet := rest.CopyConfig(cfg)
		quiet.WarningHandler = rest.NoWarnings{}
		var err error
		if admin, err = kubernetes.NewForConfig(quiet); err != nil {
			return err
		}
		if err := v1alpha1.AddToScheme(groupScheme); err != nil {
			return err
		}
		adminGroups, err = client.New(cfg, client.Options{Scheme: groupScheme})
		return err
	})
}

const group = "orders"

// The operator's ServiceAccount, as config/default names it and the assignment-configmaps policy names
// it.
const operatorNamespace, operatorServiceAccount = "consumergroup-system", "consumergroup-controller-manager"

// The node agent's ServiceAccount, in the operator's namespace, as config/default with config/nodeagent
// names it and the node-agent-heartbeats policy names it.
const nodeAgentServiceAccount = "consumergroup-node-agent"

// world is one namespace set up as docs/protocol.md tells a user to: the consumer's ServiceAccount, Role
// and RoleBinding, two consumer pods A and B, and beside them another application, ledger, whose pod C
// elects a leader with a Lease of its own. Clients act with tokens bound to each pod.
//
// In it, and in a second namespace aclNS, a tenant user may create and update ConsumerGroups. Both
// namespaces hold a Secret acl; the tenant may get it in aclNS only, and no other Secret anywhere. The
// admin has created group ledger, naming acl, and group payments, naming no Secret, in ns, and group
// billing, naming acl, in aclNS.
type world struct {
	ns, aclNS string
	a, b, c   *corev1.Pod
	// long is a consumer pod whose "<group>.<pod>" is over 253 characters, so that its Lease name is cut
	// and hashed.
	long *corev1.Pod
	// asA, asB, asC and asLong carry a token bound to their pod; asAUnbound a token of A's ServiceAccount
	// bound to no pod; asOperator a token of the operator's ServiceAccount.
	asA, asB, asC, asLong, asAUnbound, asOperator kubernetes.Interface
	// agentPod is the node agent's pod on node, and asAgent carries a token bound to it, which names the
	// node; asAgentUnbound a token of the agent's ServiceAccount bound to no pod, which names none.
	agentPod                *corev1.Pod
	asAgent, asAgentUnbound kubernetes.Interface
	// asTenant impersonates the tenant.
	asTenant client.Client
	// node names the node whose view the operator keeps, in the operator's namespace, for this world: one
	// per world, so that the worlds' views do not meet.
	node string
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// documentedRBAC returns the objects between the consumer-pod-rbac markers of docs/protocol.md.
func documentedRBAC(t *testing.T) []runtime.Object {
	t.Helper()
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "protocol.md"))
	must(t, err)
	_, rest, ok := strings.Cut(string(doc), "<!-- consumer-pod-rbac: begin")
	block, _, ok2 := strings.Cut(rest, "<!-- consumer-pod-rbac: end")
	_, yamlText, ok3 := strings.Cut(block, "```yaml\n")
	yamlText, _, ok4 := strings.Cut(yamlText, "```")
	if !ok || !ok2 || !ok3 || !ok4 {
		t.Fatal("docs/protocol.md has no yaml block between the consumer-pod-rbac markers")
	}
	var objs []runtime.Object
	reader := utilyaml.NewYAMLReader(bufio.NewReader(strings.NewReader(yamlText)))
	for {
		d, err := reader.Read()
		if errors.Is(err, io.EOF) {
			return objs
		}
		must(t, err)
		if len(bytes.TrimSpace(d)) == 0 {
			continue
		}
		obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(d, nil, nil)
		if err != nil {
			t.Fatalf("decoding the documented RBAC: %v", err)
		}
		objs = append(objs, obj)
	}
}

// newWorld sets up a namespace as world describes.
func newWorld(t *testing.T, name string) *world {
	t.Helper()
	ctx := context.Background()
	w := &world{ns: name}
	_, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	must(t, err)

	var consumerSA string
	for _, obj := range documentedRBAC(t) {
		switch o := obj.(type) {
		case *corev1.ServiceAccount:
			consumerSA = o.Name
			_, err = admin.CoreV1().ServiceAccounts(name).Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.Role:
			_, err = admin.RbacV1().Roles(name).Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.RoleBinding:
			_, err = admin.RbacV1().RoleBindings(name).Create(ctx, o, metav1.CreateOptions{})
		default:
			t.Fatalf("unexpected %T in the documented RBAC", obj)
		}
		must(t, err)
	}
	if consumerSA == "" {
		t.Fatal("the documented RBAC has no ServiceAccount")
	}
	// The consumer application also keeps ConfigMaps of its own: RBAC then lets it write any ConfigMap,
	// the group's assignment included, and only the policies keep it from that one.
	grant(t, name, consumerSA, "orders-consumer-app-config", rbacv1.PolicyRule{
		APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"create", "update"}})
	// Another application, with its own ServiceAccount, elects a leader with a Lease.
	_, err = admin.CoreV1().ServiceAccounts(name).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "ledger"}}, metav1.CreateOptions{})
	must(t, err)
	grant(t, name, "ledger", "ledger-leader-election", rbacv1.PolicyRule{
		APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"create", "get", "update"}})

	w.a = createPod(t, name, "orders-consumer-7d9f-a", consumerSA)
	w.b = createPod(t, name, "orders-consumer-7d9f-b", consumerSA)
	w.c = createPod(t, name, "ledger-0", "ledger")
	w.long = createPod(t, name, strings.Repeat("l", 248)+"-0", consumerSA)
	w.asA = podClient(t, name, consumerSA, w.a)
	w.asB = podClient(t, name, consumerSA, w.b)
	w.asC = podClient(t, name, "ledger", w.c)
	w.asLong = podClient(t, name, consumerSA, w.long)
	w.asAUnbound = podClient(t, name, consumerSA, nil)
	w.asOperator = podClient(t, operatorNamespace, operatorServiceAccount, nil)
	setUpTenant(t, w)

	// B holds its member Lease, written with its own token as pkg/member writes it; C holds its leader
	// election Lease.
	now := time.Now()
	_, err = w.asB.CoordinationV1().Leases(name).Create(ctx, memberLease(w.b).Apply(nil, name, &now, &now), metav1.CreateOptions{})
	must(t, err)
	_, err = w.asC.CoordinationV1().Leases(name).Create(ctx, leaderLease(name, "ledger-leader", w.c.Name), metav1.CreateOptions{})
	must(t, err)
	// The operator publishes the assignment, and keeps the view of the node A and B run on.
	_, err = w.asOperator.CoreV1().ConfigMaps(name).Create(ctx, assignment(name, protocol.AssignmentName(group)), metav1.CreateOptions{})
	must(t, err)
	w.node = name + "-node"
	_, err = w.asOperator.CoreV1().ConfigMaps(operatorNamespace).Create(ctx, nodeView(w.node, w.ns, 1), metav1.CreateOptions{})
	must(t, err)
	// The node agent runs on the node, in the operator's namespace.
	_, err = admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: w.node}}, metav1.CreateOptions{})
	must(t, err)
	w.agentPod, err = admin.CoreV1().Pods(operatorNamespace).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "node-agent-" + name},
		Spec: corev1.PodSpec{ServiceAccountName: nodeAgentServiceAccount, NodeName: w.node, AutomountServiceAccountToken: ptr.To(false),
			Containers: []corev1.Container{{Name: "node-agent", Image: "agent:test"}}},
	}, metav1.CreateOptions{})
	must(t, err)
	w.asAgent = podClient(t, operatorNamespace, nodeAgentServiceAccount, w.agentPod)
	w.asAgentUnbound = podClient(t, operatorNamespace, nodeAgentServiceAccount, nil)
	return w
}

// tenant is the user who writes ConsumerGroups in a world's namespaces, impersonated.
const tenant = "tenant"

// setUpTenant sets up w's tenant, its second namespace, the Secrets and the admin's groups, as world
// describes.
func setUpTenant(t *testing.T, w *world) {
	t.Helper()
	ctx := context.Background()
	w.aclNS = w.ns + "-acl"
	_, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: w.aclNS}}, metav1.CreateOptions{})
	must(t, err)
	writeGroups := rbacv1.PolicyRule{APIGroups: []string{v1alpha1.GroupVersion.Group}, Resources: []string{"consumergroups"}, Verbs: []string{"create", "update"}}
	for _, ns := range []string{w.ns, w.aclNS} {
		grantSubject(t, ns, "tenant-groups", rbacv1.Subject{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: tenant}, writeGroups)
		_, err := admin.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "acl"},
			StringData: map[string]string{"accessKey": "rocketmq2", "secretKey": "12345678"}}, metav1.CreateOptions{})
		must(t, err)
	}
	grantSubject(t, w.aclNS, "tenant-read-acl", rbacv1.Subject{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: tenant},
		rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"secrets"}, ResourceNames: []string{"acl"}, Verbs: []string{"get"}})

	cfg := rest.CopyConfig(restConfig)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: tenant}
	w.asTenant, err = client.New(cfg, client.Options{Scheme: groupScheme})
	must(t, err)

	must(t, adminGroups.Create(ctx, inlineGroup(w.ns, "ledger", "acl")))
	must(t, adminGroups.Create(ctx, inlineGroup(w.ns, "payments", "")))
	must(t, adminGroups.Create(ctx, inlineGroup(w.aclNS, "billing", "acl")))
}

// inlineGroup is a group that reads its topic's routes from an inline name server, signing its requests
// with the Secret credentials when it is not "".
func inlineGroup(ns, name, credentials string) *v1alpha1.ConsumerGroup {
	g := testenv.Group(ns, name).Topic("orders").Obj()
	g.Spec.NameServer = &v1alpha1.NameServer{Addresses: []string{"10.0.0.1:9876"}, CredentialsSecret: credentials}
	return g
}

// updateGroup reads group ns/name as the admin, changes it and writes it back with c.
func updateGroup(ctx context.Context, c client.Client, ns, name string, change func(*v1alpha1.ConsumerGroup)) error {
	var g v1alpha1.ConsumerGroup
	if err := adminGroups.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &g); err != nil {
		return err
	}
	change(&g)
	return c.Update(ctx, &g)
}

// grant binds a Role with rule to ServiceAccount sa in namespace ns.
func grant(t *testing.T, ns, sa, name string, rule rbacv1.PolicyRule) {
	t.Helper()
	grantSubject(t, ns, name, rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Name: sa, Namespace: ns}, rule)
}

// grantSubject binds a Role named name with rule to subject in namespace ns.
func grantSubject(t *testing.T, ns, name string, subject rbacv1.Subject, rule rbacv1.PolicyRule) {
	t.Helper()
	ctx := context.Background()
	_, err := admin.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: []rbacv1.PolicyRule{rule}}, metav1.CreateOptions{})
	must(t, err)
	_, err = admin.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
		Subjects:   []rbacv1.Subject{subject},
	}, metav1.CreateOptions{})
	must(t, err)
}

// createPod creates a pod running as ServiceAccount sa. No kubelet runs here; the pod need not run for a
// token to be bound to it.
func createPod(t *testing.T, ns, name, sa string) *corev1.Pod {
	t.Helper()
	pod, err := admin.CoreV1().Pods(ns).Create(context.Background(), &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{ServiceAccountName: sa, AutomountServiceAccountToken: ptr.To(false),
			Containers: []corev1.Container{{Name: "consumer", Image: "consumer:test"}}},
	}, metav1.CreateOptions{})
	must(t, err)
	return pod
}

// podClient returns a client that authenticates with a token of ServiceAccount ns/sa from the TokenRequest
// API, bound to pod as the kubelet's projected token is; bound to nothing when pod is nil.
func podClient(t *testing.T, ns, sa string, pod *corev1.Pod) kubernetes.Interface {
	t.Helper()
	req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}
	if pod != nil {
		req.Spec.BoundObjectRef = &authenticationv1.BoundObjectReference{APIVersion: "v1", Kind: "Pod", Name: pod.Name, UID: pod.UID}
	}
	tok, err := admin.CoreV1().ServiceAccounts(ns).CreateToken(context.Background(), sa, req, metav1.CreateOptions{})
	must(t, err)
	cfg := rest.AnonymousClientConfig(restConfig)
	cfg.BearerToken = tok.Status.Token
	return kubernetes.NewForConfigOrDie(cfg)
}

// memberLease is what pkg/member writes for pod as a member of group.
func memberLease(pod *corev1.Pod) protocol.MemberLease {
	return protocol.MemberLease{Group: group, Pod: pod.Name, PodUID: pod.UID, Member: pod.Name, Duration: protocol.DefaultLeaseDuration}
}

func leaderLease(ns, name, holder string) *coordinationv1.Lease {
	now := metav1.NewMicroTime(time.Now())
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(holder), LeaseDurationSeconds: ptr.To[int32](15),
			AcquireTime: &now, RenewTime: &now},
	}
}

// assignment is an assignment ConfigMap as the operator writes it: the group label, the generation.
func assignment(ns, name string) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name,
			Labels:      map[string]string{protocol.GroupLabel: group},
			Annotations: map[string]string{protocol.GenerationAnnotation: "1"}},
	}
}

// nodeView is the view of node as the operator writes it, in its namespace: one line, group orders of
// namespace ns, which members must have seen at generation mustSee.
func nodeView(node, ns string, mustSee int64) *corev1.ConfigMap {
	name := protocol.NodeViewName(node)
	data, digest := protocol.NodeViewData(name, protocol.NodeViewLines{}.With(protocol.NodeViewLine{
		Namespace: ns, Group: group, GroupUID: types.UID("6f1c2a00-0000-4000-8000-000000000001"), MustSee: mustSee}))
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: operatorNamespace, Name: name,
			Labels:      map[string]string{protocol.NodeViewLabel: "true", protocol.ManagedByLabel: protocol.ManagedByValue},
			Annotations: map[string]string{protocol.NodeViewNodeAnnotation: node, protocol.DigestAnnotation: digest}},
		Data: data,
	}
}

// heartbeat is the heartbeat Lease of node's agent as pkg/nodeagent writes it: labelled, annotated with
// its node, held by holder.
func heartbeat(ns, node, holder string) *coordinationv1.Lease {
	now := metav1.NewMicroTime(time.Now())
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: protocol.NodeAgentHeartbeatName(node),
			Labels:      map[string]string{protocol.NodeAgentHeartbeatLabel: "true"},
			Annotations: map[string]string{protocol.NodeViewNodeAnnotation: node}},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(holder), LeaseDurationSeconds: ptr.To[int32](8), RenewTime: &now},
	}
}

// runAgentHeartbeat runs a node agent with w's agent's token, as consumergroup-agent node does, until its
// heartbeat Lease is created and renewed once, or until 10 s have passed.
func runAgentHeartbeat(ctx context.Context, w *world) error {
	agent, err := nodeagent.New(nodeagent.Config{Node: w.node, Namespace: operatorNamespace, Client: w.asAgent,
		Heartbeat: nodeagent.MinHeartbeat, Pod: w.agentPod.Name})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- agent.Run(ctx) }()
	err = awaitRenewedHeartbeat(ctx, w)
	cancel()
	if runErr := <-done; runErr != nil && err == nil {
		err = runErr
	}
	return err
}

// awaitRenewedHeartbeat waits until w's agent's heartbeat Lease has been written twice, and checks that it
// is its node's, held by its pod.
func awaitRenewedHeartbeat(ctx context.Context, w *world) error {
	leases := admin.CoordinationV1().Leases(operatorNamespace)
	created := ""
	for {
		l, err := leases.Get(ctx, protocol.NodeAgentHeartbeatName(w.node), metav1.GetOptions{})
		switch {
		case err == nil && created == "":
			created = l.ResourceVersion
		case err == nil && l.ResourceVersion != created:
			if node, ok := protocol.HeartbeatNode(l); !ok || node != w.node || ptr.Deref(l.Spec.HolderIdentity, "") != w.agentPod.Name {
				return fmt.Errorf("the agent's heartbeat %+v is not node %s's, held by %s", l.ObjectMeta, w.node, w.agentPod.Name)
			}
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the agent's heartbeat was not created and renewed in 10 s (created at resource version %q): see its log", created)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// updateLease reads Lease name with c, changes it and writes it back with c.
func updateLease(ctx context.Context, c kubernetes.Interface, ns, name string, change func(*coordinationv1.Lease)) error {
	lease, err := c.CoordinationV1().Leases(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	change(lease)
	_, err = c.CoordinationV1().Leases(ns).Update(ctx, lease, metav1.UpdateOptions{})
	return err
}

// updateConfigMap reads ConfigMap name as the admin, changes it and writes it back with c.
func updateConfigMap(ctx context.Context, c kubernetes.Interface, ns, name string, change func(*corev1.ConfigMap)) error {
	cm, err := admin.CoreV1().ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	change(cm)
	_, err = c.CoreV1().ConfigMaps(ns).Update(ctx, cm, metav1.UpdateOptions{})
	return err
}

// write is one request of the test: what it does, and, when the policies refuse it, which policy and
// what its message names.
type write struct {
	name string
	do   func(ctx context.Context, w *world) error
	// policy is the policy that refuses the write (its name in config/admission); "" when it is allowed.
	// When two policies refuse it, the API server reports the first it evaluated: either may be named,
	// the first in policy or also.
	policy, also string
	// names is what the refusal's message must name: the field, and what is wrong with it.
	names []string
}

// allowed are the writes the policies let through: a member writes its own Lease as pkg/member does, the
// operator its ConfigMaps, the other application its leader election Lease, anybody an unrelated
// ConfigMap.
var allowed = []write{
	{name: "A creates, reads and renews its own member Lease as pkg/member writes it", do: func(ctx context.Context, w *world) error {
		m := memberLease(w.a)
		now := time.Now()
		lease, err := w.asA.CoordinationV1().Leases(w.ns).Create(ctx, m.Apply(nil, w.ns, &now, &now), metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("create: %w", err)
		}
		if lease, err = w.asA.CoordinationV1().Leases(w.ns).Get(ctx, lease.Name, metav1.GetOptions{}); err != nil {
			return fmt.Errorf("get: %w", err)
		}
		// It learns the group's UID, acknowledges generation 3, claims and reports load on its queues.
		m.GroupUID, m.Acked = types.UID("6f1c2a00-0000-4000-8000-000000000001"), 3
		q := protocol.Queue{Topic: "orders", Broker: "broker-a", ID: 2}
		m.Claim, m.Load = []protocol.Queue{q}, map[protocol.Queue]float64{q: 12.5}
		renew := now.Add(20 * time.Second)
		if _, err = w.asA.CoordinationV1().Leases(w.ns).Update(ctx, m.Apply(lease, w.ns, nil, &renew), metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("update: %w", err)
		}
		return nil
	}},
	{name: "a pod whose <group>.<pod> is over 253 characters creates its Lease under the hashed name", do: func(ctx context.Context, w *world) error {
		now := time.Now()
		lease := memberLease(w.long).Apply(nil, w.ns, &now, &now)
		if len(lease.Name) != 253 {
			return fmt.Errorf("the Lease name %q has %d characters, want a hashed name of 253", lease.Name, len(lease.Name))
		}
		_, err := w.asLong.CoordinationV1().Leases(w.ns).Create(ctx, lease, metav1.CreateOptions{})
		return err
	}},
	{name: "the other application's pod C renews its leader election Lease", do: func(ctx context.Context, w *world) error {
		return updateLease(ctx, w.asC, w.ns, "ledger-leader", func(l *coordinationv1.Lease) {
			l.Spec.RenewTime = ptr.To(metav1.NewMicroTime(time.Now()))
		})
	}},
	{name: "the other application's pod C creates a Lease", do: func(ctx context.Context, w *world) error {
		_, err := w.asC.CoordinationV1().Leases(w.ns).Create(ctx, leaderLease(w.ns, "ledger-compactor", w.c.Name), metav1.CreateOptions{})
		return err
	}},
	{name: "the operator updates the assignment ConfigMap", do: func(ctx context.Context, w *world) error {
		return updateConfigMap(ctx, w.asOperator, w.ns, protocol.AssignmentName(group), func(cm *corev1.ConfigMap) {
			cm.Annotations[protocol.GenerationAnnotation] = "2"
		})
	}},
	{name: "A writes a ConfigMap of its own application", do: func(ctx context.Context, w *world) error {
		_, err := w.asA.CoreV1().ConfigMaps(w.ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "orders-cache"}}, metav1.CreateOptions{})
		return err
	}},
	{name: "the admin writes an unrelated ConfigMap whose name ends in -assignment", do: func(ctx context.Context, w *world) error {
		_, err := admin.CoreV1().ConfigMaps(w.ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "homework-assignment"}}, metav1.CreateOptions{})
		return err
	}},
	{name: "the operator raises a line of its node view", do: func(ctx context.Context, w *world) error {
		return updateConfigMap(ctx, w.asOperator, operatorNamespace, protocol.NodeViewName(w.node), func(cm *corev1.ConfigMap) {
			raised := nodeView(w.node, w.ns, 2)
			cm.Data, cm.Annotations = raised.Data, raised.Annotations
		})
	}},
	{name: "the operator creates the view of another node", do: func(ctx context.Context, w *world) error {
		_, err := w.asOperator.CoreV1().ConfigMaps(operatorNamespace).Create(ctx, nodeView(w.node+"-2", w.ns, 1), metav1.CreateOptions{})
		return err
	}},
	{name: "the admin writes another ConfigMap in the operator's namespace", do: func(ctx context.Context, w *world) error {
		_, err := admin.CoreV1().ConfigMaps(operatorNamespace).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: w.ns + "-settings"}}, metav1.CreateOptions{})
		return err
	}},
	{name: "the admin writes a ConfigMap labelled as a node view outside the operator's namespace", do: func(ctx context.Context, w *world) error {
		cm := nodeView(w.node, w.ns, 1)
		cm.Namespace = w.ns
		_, err := admin.CoreV1().ConfigMaps(w.ns).Create(ctx, cm, metav1.CreateOptions{})
		return err
	}},
	{name: "the node agent creates and renews its node's heartbeat, as pkg/nodeagent writes it", do: runAgentHeartbeat},
	{name: "the admin writes another Lease in the operator's namespace, as the operator's leader election", do: func(ctx context.Context, w *world) error {
		_, err := admin.CoordinationV1().Leases(operatorNamespace).Create(ctx, leaderLease(operatorNamespace, w.ns+"-leader", "operator-0"), metav1.CreateOptions{})
		return err
	}},
	{name: "the admin writes a Lease labelled as a heartbeat outside the operator's namespace", do: func(ctx context.Context, w *world) error {
		_, err := admin.CoordinationV1().Leases(w.ns).Create(ctx, heartbeat(w.ns, w.node, "admin"), metav1.CreateOptions{})
		return err
	}},
	{name: "the tenant creates a group that names no credentialsSecret", do: func(ctx context.Context, w *world) error {
		return w.asTenant.Create(ctx, inlineGroup(w.ns, "tenant-plain", ""))
	}},
	{name: "the tenant, who may get Secret acl in the namespace, creates a group naming it", do: func(ctx context.Context, w *world) error {
		return w.asTenant.Create(ctx, inlineGroup(w.aclNS, "tenant-acl", "acl"))
	}},
	{name: "the tenant relabels the admin's group ledger, leaving its credentialsSecret acl as it is", do: func(ctx context.Context, w *world) error {
		return updateGroup(ctx, w.asTenant, w.ns, "ledger", func(g *v1alpha1.ConsumerGroup) {
			g.Labels = map[string]string{"team": "ledger"}
		})
	}},
}

// refused are the writes the policies refuse. RBAC allows each of them.
var refused = []write{
	{name: "A sets B's renewTime back an hour", policy: "member-lease", names: []string{"metadata.name", "orders.orders-consumer-7d9f-a"},
		do: func(ctx context.Context, w *world) error {
			return updateLease(ctx, w.asA, w.ns, protocol.LeaseName(group, w.b.Name), func(l *coordinationv1.Lease) {
				l.Spec.RenewTime = ptr.To(metav1.NewMicroTime(time.Now().Add(-time.Hour)))
			})
		}},
	{name: "A writes an empty claim into B's Lease", policy: "member-lease", names: []string{"metadata.name"},
		do: func(ctx context.Context, w *world) error {
			return updateLease(ctx, w.asA, w.ns, protocol.LeaseName(group, w.b.Name), func(l *coordinationv1.Lease) {
				l.Annotations[protocol.ClaimAnnotation] = protocol.NewClaim(string(w.b.UID), 0, nil).Encode()
			})
		}},
	{name: "A creates a member Lease for B", policy: "member-lease", names: []string{"metadata.name"},
		do: func(ctx context.Context, w *world) error {
			m := memberLease(w.b)
			m.Group = "payments"
			now := time.Now()
			_, err := w.asA.CoordinationV1().Leases(w.ns).Create(ctx, m.Apply(nil, w.ns, &now, &now), metav1.CreateOptions{})
			return err
		}},
	{name: "A creates a Lease under its own name that names B as its pod", policy: "member-lease",
		names: []string{"metadata.annotations[messaging.consumergroup.io/pod]", "orders-consumer-7d9f-b"},
		do: func(ctx context.Context, w *world) error {
			m := memberLease(w.a)
			m.Group = "payments"
			now := time.Now()
			lease := m.Apply(nil, w.ns, &now, &now)
			lease.Annotations[protocol.PodAnnotation] = w.b.Name
			_, err := w.asA.CoordinationV1().Leases(w.ns).Create(ctx, lease, metav1.CreateOptions{})
			return err
		}},
	{name: "A creates a Lease under its own name with B as a pod owner", policy: "member-lease", names: []string{"metadata.ownerReferences"},
		do: func(ctx context.Context, w *world) error {
			m := memberLease(w.a)
			m.Group = "billing"
			now := time.Now()
			lease := m.Apply(nil, w.ns, &now, &now)
			lease.OwnerReferences = append(lease.OwnerReferences, metav1.OwnerReference{APIVersion: "v1", Kind: "Pod", Name: w.b.Name, UID: w.b.UID})
			_, err := w.asA.CoordinationV1().Leases(w.ns).Create(ctx, lease, metav1.CreateOptions{})
			return err
		}},
	{name: "A writes a claim for B's UID into its own Lease", policy: "member-lease", names: []string{"metadata.annotations[messaging.consumergroup.io/claim]"},
		do: func(ctx context.Context, w *world) error {
			return updateLease(ctx, w.asA, w.ns, protocol.LeaseName(group, w.a.Name), func(l *coordinationv1.Lease) {
				l.Annotations[protocol.ClaimAnnotation] = protocol.NewClaim(string(w.b.UID), 3, nil).Encode()
			})
		}},
	{name: "A writes a claim whose second podUID key, which a JSON decoder reads, is B's", policy: "member-lease",
		names: []string{"metadata.annotations[messaging.consumergroup.io/claim]"},
		do: func(ctx context.Context, w *world) error {
			return updateLease(ctx, w.asA, w.ns, protocol.LeaseName(group, w.a.Name), func(l *coordinationv1.Lease) {
				own := protocol.NewClaim(string(w.a.UID), 3, nil).Encode()
				l.Annotations[protocol.ClaimAnnotation] = strings.TrimSuffix(own, "}") + `,"PodUid":"` + string(w.b.UID) + `"}`
			})
		}},
	{name: "A takes B's Lease over with itself as the pod", policy: "member-lease", names: []string{"metadata.name"},
		do: func(ctx context.Context, w *world) error {
			return updateLease(ctx, w.asA, w.ns, protocol.LeaseName(group, w.b.Name), func(l *coordinationv1.Lease) {
				now := time.Now()
				memberLease(w.a).Apply(l, w.ns, &now, &now)
				l.Name = protocol.LeaseName(group, w.b.Name)
			})
		}},
	{name: "the long-named pod creates a hashed Lease name of another pod", policy: "member-lease", names: []string{"metadata.name"},
		do: func(ctx context.Context, w *world) error {
			now := time.Now()
			lease := memberLease(w.long).Apply(nil, w.ns, &now, &now)
			lease.Name = protocol.LeaseName(group, strings.Repeat("m", 248)+"-0")
			_, err := w.asLong.CoordinationV1().Leases(w.ns).Create(ctx, lease, metav1.CreateOptions{})
			return err
		}},
	{name: "A creates a Lease that is not a member Lease", policy: "member-writes", names: []string{"metadata.labels", "orders-consumer-leader"},
		do: func(ctx context.Context, w *world) error {
			_, err := w.asA.CoordinationV1().Leases(w.ns).Create(ctx, leaderLease(w.ns, "orders-consumer-leader", w.a.Name), metav1.CreateOptions{})
			return err
		}},
	{name: "A takes the other application's leader election Lease", policy: "member-writes", names: []string{"metadata.labels", "ledger-leader"},
		do: func(ctx context.Context, w *world) error {
			return updateLease(ctx, w.asA, w.ns, "ledger-leader", func(l *coordinationv1.Lease) {
				l.Spec.HolderIdentity = ptr.To(w.a.Name)
			})
		}},
	{name: "A's ServiceAccount, with a token bound to no pod, renews B's Lease", policy: "member-writes", names: []string{"token bound to its pod"},
		do: func(ctx context.Context, w *world) error {
			return updateLease(ctx, w.asAUnbound, w.ns, protocol.LeaseName(group, w.b.Name), func(l *coordinationv1.Lease) {
				l.Spec.RenewTime = ptr.To(metav1.NewMicroTime(time.Now().Add(-time.Hour)))
			})
		}},
	{name: "A creates an assignment ConfigMap", policy: "member-writes", names: []string{"payments-assignment", "assignment ConfigMap"},
		do: func(ctx context.Context, w *world) error {
			_, err := w.asA.CoreV1().ConfigMaps(w.ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "payments-assignment"}}, metav1.CreateOptions{})
			return err
		}},
	{name: "A edits the assignment ConfigMap", policy: "member-writes", also: "assignment-configmaps", names: []string{"orders-assignment", "assignment ConfigMap"},
		do: func(ctx context.Context, w *world) error {
			return updateConfigMap(ctx, w.asA, w.ns, protocol.AssignmentName(group), func(cm *corev1.ConfigMap) {
				cm.Data = map[string]string{w.a.Name: "{}"}
			})
		}},
	{name: "the admin creates a ConfigMap with the group label", policy: "assignment-configmaps",
		names: []string{"ledger-assignment", "messaging.consumergroup.io/group", "system:serviceaccount:" + operatorNamespace + ":" + operatorServiceAccount},
		do: func(ctx context.Context, w *world) error {
			_, err := admin.CoreV1().ConfigMaps(w.ns).Create(ctx, assignment(w.ns, "ledger-assignment"), metav1.CreateOptions{})
			return err
		}},
	{name: "the admin edits the assignment ConfigMap", policy: "assignment-configmaps", names: []string{"orders-assignment", "messaging.consumergroup.io/group"},
		do: func(ctx context.Context, w *world) error {
			return updateConfigMap(ctx, admin, w.ns, protocol.AssignmentName(group), func(cm *corev1.ConfigMap) {
				cm.Annotations[protocol.GenerationAnnotation] = "1000"
			})
		}},
	{name: "the admin strips the group label from the assignment ConfigMap", policy: "assignment-configmaps", names: []string{"orders-assignment"},
		do: func(ctx context.Context, w *world) error {
			return updateConfigMap(ctx, admin, w.ns, protocol.AssignmentName(group), func(cm *corev1.ConfigMap) {
				delete(cm.Labels, protocol.GroupLabel)
			})
		}},
	{name: "the admin creates a node view", policy: "node-views",
		names: []string{"is a node view", "messaging.consumergroup.io/node-view", "system:serviceaccount:" + operatorNamespace + ":" + operatorServiceAccount},
		do: func(ctx context.Context, w *world) error {
			_, err := admin.CoreV1().ConfigMaps(operatorNamespace).Create(ctx, nodeView(w.node+"-admin", w.ns, 1), metav1.CreateOptions{})
			return err
		}},
	// The operator raised the line to 2 among the allowed writes, which run first.
	{name: "the admin lowers the line of the operator's node view back to 1, with a digest that matches", policy: "node-views", names: []string{"is a node view"},
		do: func(ctx context.Context, w *world) error {
			return updateConfigMap(ctx, admin, operatorNamespace, protocol.NodeViewName(w.node), func(cm *corev1.ConfigMap) {
				lowered := nodeView(w.node, w.ns, 1)
				cm.Data, cm.Annotations = lowered.Data, lowered.Annotations
			})
		}},
	{name: "the admin strips the node-view label from the operator's node view", policy: "node-views", names: []string{"is a node view"},
		do: func(ctx context.Context, w *world) error {
			return updateConfigMap(ctx, admin, operatorNamespace, protocol.NodeViewName(w.node), func(cm *corev1.ConfigMap) {
				delete(cm.Labels, protocol.NodeViewLabel)
			})
		}},
	{name: "the admin creates an unlabelled ConfigMap under a node view's name", policy: "node-views", names: []string{"named node-view.<node>"},
		do: func(ctx context.Context, w *world) error {
			_, err := admin.CoreV1().ConfigMaps(operatorNamespace).Create(ctx, &corev1.ConfigMap{
				ObjectMeta: metav1.ObjectMeta{Name: protocol.NodeViewName(w.node + "-unlabelled")}}, metav1.CreateOptions{})
			return err
		}},
	{name: "the node agent creates the heartbeat of another node", policy: "node-agent-heartbeats",
		names: []string{"metadata.annotations[messaging.consumergroup.io/node]", "system:serviceaccount:" + operatorNamespace + ":" + nodeAgentServiceAccount, "-node-other"},
		do: func(ctx context.Context, w *world) error {
			_, err := w.asAgent.CoordinationV1().Leases(operatorNamespace).Create(ctx, heartbeat(operatorNamespace, w.node+"-other", w.agentPod.Name), metav1.CreateOptions{})
			return err
		}},
	{name: "the node agent creates another node's heartbeat Lease, annotated with its own node", policy: "node-agent-heartbeats",
		names: []string{"metadata.name", "-node-elsewhere"},
		do: func(ctx context.Context, w *world) error {
			lease := heartbeat(operatorNamespace, w.node, w.agentPod.Name)
			lease.Name = protocol.NodeAgentHeartbeatName(w.node + "-elsewhere")
			_, err := w.asAgent.CoordinationV1().Leases(operatorNamespace).Create(ctx, lease, metav1.CreateOptions{})
			return err
		}},
	{name: "the node agent strips the label from its heartbeat", policy: "node-agent-heartbeats",
		names: []string{"metadata.labels[messaging.consumergroup.io/node-agent-heartbeat]", `not ""`},
		do: func(ctx context.Context, w *world) error {
			return updateLease(ctx, w.asAgent, operatorNamespace, protocol.NodeAgentHeartbeatName(w.node), func(l *coordinationv1.Lease) {
				delete(l.Labels, protocol.NodeAgentHeartbeatLabel)
			})
		}},
	{name: "the node agent's ServiceAccount, with a token bound to no pod, writes a heartbeat", policy: "node-agent-heartbeats",
		names: []string{"token bound to its pod", "authentication.kubernetes.io/node-name"},
		do: func(ctx context.Context, w *world) error {
			_, err := w.asAgentUnbound.CoordinationV1().Leases(operatorNamespace).Create(ctx, heartbeat(operatorNamespace, w.node+"-unbound", "agent"), metav1.CreateOptions{})
			return err
		}},
	{name: "the node agent creates a Lease that is not a heartbeat", policy: "node-agent-heartbeats",
		names: []string{"metadata.labels", "is not a heartbeat", "system:serviceaccount:" + operatorNamespace + ":" + nodeAgentServiceAccount},
		do: func(ctx context.Context, w *world) error {
			_, err := w.asAgent.CoordinationV1().Leases(operatorNamespace).Create(ctx, leaderLease(operatorNamespace, w.ns+"-agent-leader", w.agentPod.Name), metav1.CreateOptions{})
			return err
		}},
	{name: "the node agent takes the operator's leader election Lease", policy: "node-agent-heartbeats",
		names: []string{"metadata.labels", "is not a heartbeat"},
		do: func(ctx context.Context, w *world) error {
			return updateLease(ctx, w.asAgent, operatorNamespace, w.ns+"-leader", func(l *coordinationv1.Lease) {
				l.Spec.HolderIdentity = ptr.To(w.agentPod.Name)
			})
		}},
	{name: "the admin creates a heartbeat", policy: "node-agent-heartbeats",
		names: []string{"is the heartbeat of a node agent", "system:serviceaccount:" + operatorNamespace + ":" + nodeAgentServiceAccount},
		do: func(ctx context.Context, w *world) error {
			_, err := admin.CoordinationV1().Leases(operatorNamespace).Create(ctx, heartbeat(operatorNamespace, w.node+"-admin", "admin"), metav1.CreateOptions{})
			return err
		}},
	{name: "the operator renews the node agent's heartbeat", policy: "node-agent-heartbeats",
		names: []string{"is the heartbeat of a node agent", "not system:serviceaccount:" + operatorNamespace + ":" + operatorServiceAccount},
		do: func(ctx context.Context, w *world) error {
			return updateLease(ctx, w.asOperator, operatorNamespace, protocol.NodeAgentHeartbeatName(w.node), func(l *coordinationv1.Lease) {
				l.Spec.RenewTime = ptr.To(metav1.NewMicroTime(time.Now()))
			})
		}},
	{name: "the admin creates an unlabelled Lease under a heartbeat's name", policy: "node-agent-heartbeats", names: []string{"named node-agent.<node>"},
		do: func(ctx context.Context, w *world) error {
			_, err := admin.CoordinationV1().Leases(operatorNamespace).Create(ctx, leaderLease(operatorNamespace, protocol.NodeAgentHeartbeatName(w.node+"-unlabelled"), "admin"), metav1.CreateOptions{})
			return err
		}},
	{name: "the tenant creates a group naming credentialsSecret acl, which it may not get", policy: "nameserver-credentials",
		names: []string{"spec.nameServer.credentialsSecret: you may not read Secret acl in this namespace, so the operator will not read it for you"},
		do: func(ctx context.Context, w *world) error {
			return w.asTenant.Create(ctx, inlineGroup(w.ns, "tenant-acl", "acl"))
		}},
	{name: "the tenant sets credentialsSecret acl, which it may not get, on the admin's group payments", policy: "nameserver-credentials",
		names: []string{"spec.nameServer.credentialsSecret", "Secret acl"},
		do: func(ctx context.Context, w *world) error {
			return updateGroup(ctx, w.asTenant, w.ns, "payments", func(g *v1alpha1.ConsumerGroup) {
				g.Spec.NameServer.CredentialsSecret = "acl"
			})
		}},
	{name: "the tenant changes group billing's credentialsSecret from acl, which it may get, to payments-acl, which it may not", policy: "nameserver-credentials",
		names: []string{"spec.nameServer.credentialsSecret", "Secret payments-acl"},
		do: func(ctx context.Context, w *world) error {
			return updateGroup(ctx, w.asTenant, w.aclNS, "billing", func(g *v1alpha1.ConsumerGroup) {
				g.Spec.NameServer.CredentialsSecret = "payments-acl"
			})
		}},
	{name: "the tenant, who may not get Secret acl, sends the admin's group ledger, which names it, to another name server", policy: "nameserver-credentials",
		names: []string{"spec.nameServer.credentialsSecret", "Secret acl"},
		do: func(ctx context.Context, w *world) error {
			return updateGroup(ctx, w.asTenant, w.ns, "ledger", func(g *v1alpha1.ConsumerGroup) {
				g.Spec.NameServer.Addresses = []string{"10.9.9.9:9876"}
			})
		}},
	// Last: it leaves B's Lease without its label.
	{name: "A strips the group label from B's Lease", policy: "member-lease", also: "member-writes", names: []string{"metadata.labels", "messaging.consumergroup.io/group"},
		do: func(ctx context.Context, w *world) error {
			return updateLease(ctx, w.asA, w.ns, protocol.LeaseName(group, w.b.Name), func(l *coordinationv1.Lease) {
				delete(l.Labels, protocol.GroupLabel)
			})
		}},
}

// TestAdmissionPolicies runs every write twice: in a namespace without the policies, where RBAC lets
// each through, and in another once the policies of config/admission are in force, where each write of
// refused is refused by the policy it names, with a message that names the field, and each of allowed
// still goes through.
func TestAdmissionPolicies(t *testing.T) {
	ctx := context.Background()
	_, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: operatorNamespace}}, metav1.CreateOptions{})
	must(t, err)
	_, err = admin.CoreV1().ServiceAccounts(operatorNamespace).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: operatorServiceAccount}}, metav1.CreateOptions{})
	must(t, err)
	operatorMayWriteConfigMaps(t)
	nodeAgentMayWriteLeases(t)

	without := newWorld(t, "without-policies")
	for _, wr := range append(append([]write{}, allowed...), refused...) {
		if err := wr.do(ctx, without); err != nil {
			t.Errorf("without the policies, %s: %v; want it allowed, so that only the policies refuse it", wr.name, err)
		}
	}
	if t.Failed() {
		t.FailNow()
	}

	probes := newWorld(t, "await-policies")
	policies := installPolicies(t, probes)
	with := newWorld(t, "with-policies")
	for _, wr := range allowed {
		if err := wr.do(ctx, with); err != nil {
			t.Errorf("%s: %v; want it allowed", wr.name, err)
		}
	}
	for _, wr := range refused {
		err := wr.do(ctx, with)
		want := "ValidatingAdmissionPolicy '" + policies[wr.policy] + "'"
		by := err != nil && strings.Contains(err.Error(), want)
		if wr.also != "" {
			also := "ValidatingAdmissionPolicy '" + policies[wr.also] + "'"
			by = by || err != nil && strings.Contains(err.Error(), also)
			want += " or " + also
		}
		switch {
		case err == nil:
			t.Errorf("%s: allowed, want it refused by %s", wr.name, want)
		case !apierrors.IsForbidden(err) || !by:
			t.Errorf("%s: %v; want it refused by %s", wr.name, err, want)
		default:
			for _, s := range wr.names {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("%s: the refusal %q does not name %q", wr.name, err, s)
				}
			}
			t.Logf("%s: %v", wr.name, err)
		}
	}
}

// operatorMayWriteConfigMaps grants the operator's ServiceAccount what config/rbac grants it of
// ConfigMaps.
func operatorMayWriteConfigMaps(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	_, err := admin.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "operator-configmaps"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "create", "update"}}}}, metav1.CreateOptions{})
	must(t, err)
	_, err = admin.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "operator-configmaps"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "operator-configmaps"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: operatorServiceAccount, Namespace: operatorNamespace}},
	}, metav1.CreateOptions{})
	must(t, err)
}

// nodeAgentMayWriteLeases creates the node agent's ServiceAccount and grants it what config/nodeagent
// grants it of Leases, in the operator's namespace; and lets the operator write Leases there too, as its
// leader election does, so that only the policy keeps it from a heartbeat.
func nodeAgentMayWriteLeases(t *testing.T) {
	t.Helper()
	_, err := admin.CoreV1().ServiceAccounts(operatorNamespace).Create(context.Background(),
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: nodeAgentServiceAccount}}, metav1.CreateOptions{})
	must(t, err)
	leases := rbacv1.PolicyRule{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "create", "update"}}
	grant(t, operatorNamespace, nodeAgentServiceAccount, "node-agent-leases", leases)
	grant(t, operatorNamespace, operatorServiceAccount, "operator-leases", leases)
}

// installPolicies creates the policies and bindings of config/admission's kustomization, removes them when
// the test ends, and returns once each policy refuses a write it must refuse. It returns the policies'
// names by their names in config/admission (the same here: no kustomize prefix).
func installPolicies(t *testing.T, probes *world) map[string]string {
	t.Helper()
	ctx := context.Background()
	var k struct {
		Resources []string `json:"resources"`
	}
	data, err := os.ReadFile("kustomization.yaml")
	must(t, err)
	must(t, yaml.Unmarshal(data, &k))
	names := map[string]string{}
	for _, file := range k.Resources {
		data, err := os.ReadFile(file)
		must(t, err)
		reader := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
		for {
			d, err := reader.Read()
			if errors.Is(err, io.EOF) {
				break
			}
			must(t, err)
			obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(d, nil, nil)
			if err != nil {
				t.Fatalf("%s: %v", file, err)
			}
			switch o := obj.(type) {
			case *admissionregistrationv1.ValidatingAdmissionPolicy:
				if o.Spec.FailurePolicy == nil || *o.Spec.FailurePolicy != admissionregistrationv1.Fail {
					t.Errorf("policy %s: failurePolicy %v, want Fail", o.Name, o.Spec.FailurePolicy)
				}
				_, err = admin.AdmissionregistrationV1().ValidatingAdmissionPolicies().Create(ctx, o, metav1.CreateOptions{})
				names[o.Name] = o.Name
				t.Cleanup(func() {
					_ = admin.AdmissionregistrationV1().ValidatingAdmissionPolicies().Delete(context.Background(), o.Name, metav1.DeleteOptions{})
				})
			case *admissionregistrationv1.ValidatingAdmissionPolicyBinding:
				_, err = admin.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Create(ctx, o, metav1.CreateOptions{})
				t.Cleanup(func() {
					_ = admin.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Delete(context.Background(), o.Name, metav1.DeleteOptions{})
				})
			default:
				t.Fatalf("%s holds a %T", file, obj)
			}
			if err != nil {
				t.Fatalf("%s: %v", file, err)
			}
		}
	}
	for _, want := range []string{"member-lease", "member-writes", "assignment-configmaps", "node-views", "node-agent-heartbeats", "nameserver-credentials"} {
		if names[want] == "" {
			t.Fatalf("config/admission has no policy %s, of %v", want, names)
		}
	}
	awaitPolicies(t, probes)
	for name := range names {
		p, err := admin.AdmissionregistrationV1().ValidatingAdmissionPolicies().Get(ctx, name, metav1.GetOptions{})
		must(t, err)
		if tc := p.Status.TypeChecking; tc != nil {
			for _, w := range tc.ExpressionWarnings {
				t.Logf("policy %s: type checking %s: %s", name, w.FieldRef, w.Warning)
			}
		}
	}
	return names
}

// awaitPolicies waits until each policy is in force: a write it refuses, sent with dry run in w, set up
// before the policies, is refused; and, once the operator's ServiceAccount is known to the policy, the
// operator's write of an assignment ConfigMap, or of a node view, goes through.
func awaitPolicies(t *testing.T, w *world) {
	t.Helper()
	ctx := context.Background()
	dry := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	probes := map[string]func() error{
		"member-lease": func() error {
			m := memberLease(w.b)
			now := time.Now()
			_, err := w.asA.CoordinationV1().Leases(w.ns).Create(ctx, m.Apply(nil, w.ns, &now, &now), dry)
			return err
		},
		"member-writes": func() error {
			_, err := w.asA.CoordinationV1().Leases(w.ns).Create(ctx, leaderLease(w.ns, "probe", w.a.Name), dry)
			return err
		},
		"assignment-configmaps": func() error {
			if _, err := w.asOperator.CoreV1().ConfigMaps(w.ns).Create(ctx, assignment(w.ns, "probe-assignment"), dry); err != nil {
				return fmt.Errorf("the operator's write: %v", err) // not Forbidden: the wait goes on
			}
			_, err := admin.CoreV1().ConfigMaps(w.ns).Create(ctx, assignment(w.ns, "probe-assignment"), dry)
			return err
		},
		"node-views": func() error {
			if _, err := w.asOperator.CoreV1().ConfigMaps(operatorNamespace).Create(ctx, nodeView(w.node+"-probe", w.ns, 1), dry); err != nil {
				return fmt.Errorf("the operator's write: %v", err) // not Forbidden: the wait goes on
			}
			_, err := admin.CoreV1().ConfigMaps(operatorNamespace).Create(ctx, nodeView(w.node+"-probe", w.ns, 1), dry)
			return err
		},
		"node-agent-heartbeats": func() error {
			if _, err := w.asAgent.CoordinationV1().Leases(operatorNamespace).Create(ctx, heartbeat(operatorNamespace, w.node, w.agentPod.Name), dry); err != nil {
				return fmt.Errorf("the node agent's write: %v", err) // not Forbidden: the wait goes on
			}
			_, err := admin.CoordinationV1().Leases(operatorNamespace).Create(ctx, heartbeat(operatorNamespace, w.node, "admin"), dry)
			return err
		},
		"nameserver-credentials": func() error {
			return w.asTenant.Create(ctx, inlineGroup(w.ns, "probe", "acl"), client.DryRunAll)
		},
	}
	for name, probe := range probes {
		testenv.Eventually(t, 30*time.Second, func() error {
			if err := probe(); !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "'"+name+"'") {
				return fmt.Errorf("policy %s is not in force yet: a write it refuses returned %v", name, err)
			}
			return nil
		})
	}
}
