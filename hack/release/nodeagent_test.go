package main

import (
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

// nodeAgentPort is protocol.DefaultNodeAgentPort (this module does not import the operator's): the port
// the node agent listens on and its Service serves.
const nodeAgentPort = 9443

// nodeAgentValues turns node mode on in the chart, with its defaults.
var nodeAgentValues = map[string]any{"nodeAgent": map[string]any{"enabled": true}}

// renderWithNodeAgent renders config/default with config/nodeagent added as its kustomization says.
func renderWithNodeAgent(t *testing.T) []*unstructured.Unstructured {
	t.Helper()
	fsys, err := configInMemory(root)
	must(t, err)
	must(t, fsys.WriteFile("/with-nodeagent/kustomization.yaml", []byte("resources:\n  - ../config/default\n")))
	def, err := fsys.ReadFile("/config/default/kustomization.yaml")
	must(t, err)
	def = append(def, []byte("components:\n  - ../nodeagent\n")...)
	must(t, fsys.WriteFile("/config/default/kustomization.yaml", def))
	out, err := kustomize(fsys, "/with-nodeagent")
	must(t, err)
	return decodeAll(t, out)
}

// nodeAgent is what one install carries of node mode.
type nodeAgent struct {
	sa             corev1.ServiceAccount
	clusterRole    rbacv1.ClusterRole
	clusterBinding rbacv1.ClusterRoleBinding
	role           rbacv1.Role
	binding        rbacv1.RoleBinding
	ds             appsv1.DaemonSet
	svc            corev1.Service
	// operator is the operator's Deployment.
	operator appsv1.Deployment
}

// nodeAgentOf finds the node agent's objects in objs, by the DaemonSet's ServiceAccount and the
// bindings to it; the test fails unless there is exactly one DaemonSet.
func nodeAgentOf(t *testing.T, objs []*unstructured.Unstructured) nodeAgent {
	t.Helper()
	var a nodeAgent
	a.ds = only[appsv1.DaemonSet](t, objs, "DaemonSet")
	a.operator, _ = container(t, objs)
	name := a.ds.Spec.Template.Spec.ServiceAccountName
	for _, o := range objs {
		switch {
		case o.GetKind() == "ServiceAccount" && o.GetName() == name:
			as(t, o, &a.sa)
		case o.GetKind() == "Service" && o.GetName() == name:
			as(t, o, &a.svc)
		case o.GetKind() == "ClusterRoleBinding" && o.GetName() == name:
			as(t, o, &a.clusterBinding)
		case o.GetKind() == "RoleBinding" && o.GetName() == name:
			as(t, o, &a.binding)
		}
	}
	for _, o := range objs {
		switch {
		case o.GetKind() == "ClusterRole" && o.GetName() == a.clusterBinding.RoleRef.Name:
			as(t, o, &a.clusterRole)
		case o.GetKind() == "Role" && o.GetName() == a.binding.RoleRef.Name && o.GetNamespace() == a.binding.Namespace:
			as(t, o, &a.role)
		}
	}
	if a.sa.Name == "" || a.svc.Name == "" || a.clusterRole.Name == "" || a.role.Name == "" {
		t.Fatalf("the node agent's DaemonSet runs as %q: ServiceAccount %q, Service %q, ClusterRole %q, Role %q; want all, named as it",
			name, a.sa.Name, a.svc.Name, a.clusterRole.Name, a.role.Name)
	}
	return a
}

// check checks what node mode needs, in any install: the agent runs as its own ServiceAccount, which
// may create TokenReviews, get ConfigMaps and get, create and update Leases (its heartbeat) in the
// operator's namespace, and nothing else; it renews a heartbeat, held by its pod; its pods
// pass the restricted Pod Security Standard, run on every node image allows, and are reached on their
// own node only, through a Service that selects them and no operator pod; the operator keeps the node
// views in its own namespace, where the agent reads them.
func (a nodeAgent) check(t *testing.T, image string) {
	t.Helper()
	ns := a.operator.Namespace
	subjects := []rbacv1.Subject{{Kind: "ServiceAccount", Name: a.sa.Name, Namespace: ns}}
	for _, o := range []string{a.sa.Namespace, a.ds.Namespace, a.svc.Namespace, a.role.Namespace, a.binding.Namespace} {
		if o != ns {
			t.Errorf("a node agent's object is in namespace %q, want the operator's, %s", o, ns)
		}
	}
	tokenReviews := []rbacv1.PolicyRule{{APIGroups: []string{"authentication.k8s.io"}, Resources: []string{"tokenreviews"}, Verbs: []string{"create"}}}
	if !reflect.DeepEqual(a.clusterRole.Rules, tokenReviews) || a.clusterBinding.RoleRef.Kind != "ClusterRole" || !reflect.DeepEqual(a.clusterBinding.Subjects, subjects) {
		t.Errorf("the node agent's ClusterRole %s grants %+v, bound to %+v; want only create on tokenreviews, bound to %+v",
			a.clusterRole.Name, a.clusterRole.Rules, a.clusterBinding.Subjects, subjects)
	}
	nodeViewAndHeartbeat := []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get"}},
		{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "create", "update"}},
	}
	if !reflect.DeepEqual(a.role.Rules, nodeViewAndHeartbeat) || a.binding.RoleRef.Kind != "Role" || !reflect.DeepEqual(a.binding.Subjects, subjects) {
		t.Errorf("the node agent's Role %s grants %+v, bound to %+v; want only get on configmaps, and get, create and update on leases, bound to %+v",
			a.role.Name, a.role.Rules, a.binding.Subjects, subjects)
	}

	pod := a.ds.Spec.Template.Spec
	if pod.AutomountServiceAccountToken == nil || !*pod.AutomountServiceAccountToken {
		t.Errorf("the node agent's token is not mounted (%v): it needs it for its TokenReviews and its node view", pod.AutomountServiceAccountToken)
	}
	checkRestricted(t, "the node agent", pod)
	checkRestricted(t, "the operator", a.operator.Spec.Template.Spec)
	if len(pod.Containers) != 1 {
		t.Fatalf("the node agent runs %d containers, want 1", len(pod.Containers))
	}
	c := pod.Containers[0]
	if c.Image != image {
		t.Errorf("the node agent runs %s, want %s", c.Image, image)
	}
	if len(c.Args) == 0 || c.Args[0] != "node" || !slices.Contains(c.Args, "-listen=:9443") ||
		!slices.ContainsFunc(c.Args, func(a string) bool { return strings.HasPrefix(a, "-min-read-interval=") }) ||
		!slices.ContainsFunc(c.Args, func(a string) bool { return strings.HasPrefix(a, "-heartbeat=") }) {
		t.Errorf("the node agent's args %q, want consumergroup-agent node -listen=:9443 -min-read-interval=... -heartbeat=...", c.Args)
	}
	fieldRefs := map[string]string{}
	for _, e := range c.Env {
		if e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
			fieldRefs[e.Name] = e.ValueFrom.FieldRef.FieldPath
		}
	}
	if fieldRefs["NODE_NAME"] != "spec.nodeName" || fieldRefs["POD_NAMESPACE"] != "metadata.namespace" || fieldRefs["POD_NAME"] != "metadata.name" {
		t.Errorf("the node agent's env %+v, want NODE_NAME from spec.nodeName, POD_NAMESPACE from metadata.namespace and POD_NAME from metadata.name", c.Env)
	}
	port := slices.IndexFunc(c.Ports, func(p corev1.ContainerPort) bool { return p.ContainerPort == nodeAgentPort })
	if port < 0 {
		t.Fatalf("the node agent's ports %+v lack %d", c.Ports, nodeAgentPort)
	}
	if p := c.LivenessProbe; p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/healthz" ||
		(p.HTTPGet.Port.IntValue() != nodeAgentPort && p.HTTPGet.Port.String() != c.Ports[port].Name) {
		t.Errorf("the node agent's liveness probe %+v, want GET /healthz on port %d", p, nodeAgentPort)
	}
	if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
		t.Errorf("the node agent's resources %+v, want CPU and memory requested and memory limited", c.Resources)
	}

	// Reached on its own node, through the Service, which selects the agent's pods and not the operator's.
	sel := labels.SelectorFromSet(a.svc.Spec.Selector)
	if p := a.svc.Spec.InternalTrafficPolicy; p == nil || *p != corev1.ServiceInternalTrafficPolicyLocal {
		t.Errorf("the node agent's Service has internalTrafficPolicy %s, want Local: a member must reach its own node's agent", ptr.Deref(p, "unset"))
	}
	if len(a.svc.Spec.Ports) != 1 || a.svc.Spec.Ports[0].Port != nodeAgentPort ||
		(a.svc.Spec.Ports[0].TargetPort.String() != c.Ports[port].Name && a.svc.Spec.Ports[0].TargetPort.IntValue() != nodeAgentPort) {
		t.Errorf("the node agent's Service ports %+v, want %d to the agent's", a.svc.Spec.Ports, nodeAgentPort)
	}
	if sel.Empty() || !sel.Matches(labels.Set(a.ds.Spec.Template.Labels)) || sel.Matches(labels.Set(a.operator.Spec.Template.Labels)) {
		t.Errorf("the node agent's Service selects %v: want the agent's pods (%v) and not the operator's (%v)",
			a.svc.Spec.Selector, a.ds.Spec.Template.Labels, a.operator.Spec.Template.Labels)
	}
	if dsSel := labels.SelectorFromSet(a.ds.Spec.Selector.MatchLabels); dsSel.Matches(labels.Set(a.operator.Spec.Template.Labels)) ||
		labels.SelectorFromSet(a.operator.Spec.Selector.MatchLabels).Matches(labels.Set(a.ds.Spec.Template.Labels)) {
		t.Errorf("the DaemonSet's selector %v and the Deployment's %v select each other's pods", a.ds.Spec.Selector, a.operator.Spec.Selector)
	}

	// The operator keeps the node views where the agent reads them.
	if got := nodeViewsNamespace(a.operator); got != ns {
		t.Errorf("the operator keeps the node views in %q, want its own namespace %s", got, ns)
	}
}

// nodeViewsNamespace is the namespace the operator's --node-views-namespace names, with a $(VAR) of
// its env resolved as the kubelet does; "" without the flag.
func nodeViewsNamespace(dep appsv1.Deployment) string {
	c := dep.Spec.Template.Spec.Containers[0]
	for _, arg := range c.Args {
		value, ok := strings.CutPrefix(arg, "--node-views-namespace=")
		if !ok {
			continue
		}
		for _, e := range c.Env {
			ref := "$(" + e.Name + ")"
			switch {
			case e.ValueFrom == nil:
				value = strings.ReplaceAll(value, ref, e.Value)
			case e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.namespace":
				value = strings.ReplaceAll(value, ref, dep.Namespace)
			}
		}
		return value
	}
	return ""
}

// checkRestricted checks that pod passes the restricted Pod Security Standard (what it checks of it:
// TestPodsPassRestrictedPodSecurity has a kube-apiserver enforce all of it): no host namespaces, ports or
// paths, non-root, no privilege escalation, every capability dropped, RuntimeDefault seccomp, and a
// read-only root.
func checkRestricted(t *testing.T, who string, pod corev1.PodSpec) {
	t.Helper()
	if pod.HostNetwork || pod.HostPID || pod.HostIPC {
		t.Errorf("%s shares the node's namespaces", who)
	}
	for _, v := range pod.Volumes {
		if v.HostPath != nil {
			t.Errorf("%s mounts the node's %s", who, v.HostPath.Path)
		}
	}
	psc := pod.SecurityContext
	if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("%s: pod security context %+v, want non-root with RuntimeDefault seccomp", who, psc)
	}
	for _, c := range slices.Concat(pod.InitContainers, pod.Containers) {
		sc := c.SecurityContext
		if sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
			(sc.Privileged != nil && *sc.Privileged) || sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) ||
			len(sc.Capabilities.Add) != 0 {
			t.Errorf("%s: container %s security context %+v, want no privilege escalation, a read-only root and every capability dropped", who, c.Name, sc)
		}
		for _, p := range c.Ports {
			if p.HostPort != 0 {
				t.Errorf("%s: container %s takes the node's port %d", who, c.Name, p.HostPort)
			}
		}
	}
}

// TestNodeAgentInConfig: config/nodeagent, added to config/default as its kustomization says, runs the
// node agent with what node mode needs, and config/default alone does not.
func TestNodeAgentInConfig(t *testing.T) {
	a := nodeAgentOf(t, renderWithNodeAgent(t))
	a.check(t, agentRepository+":latest")
	if a.ds.Namespace != "consumergroup-system" || a.svc.Name != "consumergroup-node-agent" {
		t.Errorf("config/nodeagent runs %s/%s behind Service %s, want consumergroup-system/consumergroup-node-agent: the address docs/install.md gives members",
			a.ds.Namespace, a.ds.Name, a.svc.Name)
	}
	if !slices.ContainsFunc(a.ds.Spec.Template.Spec.Tolerations, func(tol corev1.Toleration) bool {
		return tol.Operator == corev1.TolerationOpExists && tol.Key == "" && tol.Effect == ""
	}) {
		t.Errorf("the node agent tolerates %+v, want every taint", a.ds.Spec.Template.Spec.Tolerations)
	}

	checkDocumentedMember(t, "http://"+a.svc.Name+"."+a.svc.Namespace+".svc:9443")

	plain, err := kustomize(filesys.MakeFsOnDisk(), filepath.Join(root, "config", "default"))
	must(t, err)
	objs := decodeAll(t, plain)
	if n := len(find(objs, "DaemonSet")); n != 0 {
		t.Errorf("config/default renders %d DaemonSets; the node agent is opt-in", n)
	}
	if dep, _ := container(t, objs); nodeViewsNamespace(dep) != "" {
		t.Errorf("config/default keeps node views in %q; node mode is opt-in", nodeViewsNamespace(dep))
	}
}

// checkDocumentedMember checks the member pod of docs/install.md's node mode: NODE_AGENT is url, and
// NODE_AGENT_TOKEN_FILE is the file of a projected token for the node agent's audience, mounted.
func checkDocumentedMember(t *testing.T, url string) {
	t.Helper()
	doc, err := os.ReadFile(filepath.Join(root, "docs", "install.md"))
	must(t, err)
	_, section, ok := strings.Cut(string(doc), "\n### Node mode\n")
	_, block, ok2 := strings.Cut(section, "```yaml\n")
	block, _, ok3 := strings.Cut(block, "```")
	if !ok || !ok2 || !ok3 {
		t.Fatal("docs/install.md has no yaml block in its section Node mode")
	}
	var pod corev1.Pod
	must(t, yaml.Unmarshal([]byte(block), &pod))
	if len(pod.Spec.InitContainers) != 1 || len(pod.Spec.Volumes) != 1 || pod.Spec.Volumes[0].Projected == nil ||
		len(pod.Spec.Volumes[0].Projected.Sources) != 1 || pod.Spec.Volumes[0].Projected.Sources[0].ServiceAccountToken == nil {
		t.Fatalf("docs/install.md's node mode pod %+v, want one container and a projected service account token", pod.Spec)
	}
	c, v := pod.Spec.InitContainers[0], pod.Spec.Volumes[0]
	token := v.Projected.Sources[0].ServiceAccountToken
	env := map[string]string{}
	for _, e := range c.Env {
		env[e.Name] = e.Value
	}
	mounted := slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool {
		return m.Name == v.Name && env["NODE_AGENT_TOKEN_FILE"] == m.MountPath+"/"+token.Path
	})
	if env["NODE_AGENT"] != url || !mounted || token.Audience != "consumergroup-node-agent" || ptr.Deref(token.ExpirationSeconds, 0) != 3600 {
		t.Errorf("docs/install.md's node mode pod: NODE_AGENT %q (want %s), NODE_AGENT_TOKEN_FILE %q mounted %v, token %+v (want audience consumergroup-node-agent, 3600 s)",
			env["NODE_AGENT"], url, env["NODE_AGENT_TOKEN_FILE"], mounted, token)
	}
}

// TestNodeAgentInChart: nodeAgent.enabled runs the same node agent as config/nodeagent, its values land,
// and it is off by default.
func TestNodeAgentInChart(t *testing.T) {
	objs := renderChart(t, nil, "consumergroup-system")
	if n := len(find(objs, "DaemonSet")); n != 0 {
		t.Errorf("the chart renders %d DaemonSets by default; the node agent is opt-in", n)
	}
	if dep, _ := container(t, objs); nodeViewsNamespace(dep) != "" {
		t.Errorf("the chart keeps node views in %q by default; node mode is opt-in", nodeViewsNamespace(dep))
	}

	ch := renderChart(t, nodeAgentValues, "consumergroup-system")
	chart := nodeAgentOf(t, ch)
	chartVersion := only[appsv1.Deployment](t, ch, "Deployment").Labels["app.kubernetes.io/version"]
	chart.check(t, agentRepository+":"+chartVersion)
	if chart.svc.Name != "cgo-consumergroup-operator-node-agent" {
		t.Errorf("the node agent's Service is %s, want <fullname>-node-agent", chart.svc.Name)
	}
	// The same agent as config/nodeagent's: rules, container (but its image), update strategy,
	// tolerations and Service.
	config := nodeAgentOf(t, renderWithNodeAgent(t))
	if !reflect.DeepEqual(chart.clusterRole.Rules, config.clusterRole.Rules) || !reflect.DeepEqual(chart.role.Rules, config.role.Rules) {
		t.Errorf("the chart's node agent rules %+v and %+v differ from config/nodeagent's %+v and %+v",
			chart.clusterRole.Rules, chart.role.Rules, config.clusterRole.Rules, config.role.Rules)
	}
	cc, kc := chart.ds.Spec.Template.Spec.Containers[0], config.ds.Spec.Template.Spec.Containers[0]
	cc.Image, kc.Image = "", ""
	if !reflect.DeepEqual(cc, kc) {
		t.Errorf("the chart's node agent container\n%+v\ndiffers from config/nodeagent's\n%+v", cc, kc)
	}
	if !reflect.DeepEqual(chart.ds.Spec.UpdateStrategy, config.ds.Spec.UpdateStrategy) ||
		!reflect.DeepEqual(chart.ds.Spec.Template.Spec.Tolerations, config.ds.Spec.Template.Spec.Tolerations) {
		t.Errorf("the chart's update strategy %+v and tolerations %+v differ from config/nodeagent's %+v and %+v",
			chart.ds.Spec.UpdateStrategy, chart.ds.Spec.Template.Spec.Tolerations, config.ds.Spec.UpdateStrategy, config.ds.Spec.Template.Spec.Tolerations)
	}
	if !reflect.DeepEqual(chart.svc.Spec.Ports, config.svc.Spec.Ports) || !reflect.DeepEqual(chart.svc.Spec.InternalTrafficPolicy, config.svc.Spec.InternalTrafficPolicy) {
		t.Errorf("the chart's node agent Service %+v differs from config/nodeagent's %+v", chart.svc.Spec, config.svc.Spec)
	}
	// The non-default values.
	objs = renderChart(t, nonDefaultValues, "ops")
	a := nodeAgentOf(t, objs)
	a.check(t, "registry.example/cg/agent:1.2.3")
	c := a.ds.Spec.Template.Spec.Containers[0]
	pod := a.ds.Spec.Template.Spec
	if c.ImagePullPolicy != corev1.PullAlways || !slices.Contains(c.Args, "-min-read-interval=2s") || !slices.Contains(c.Args, "-heartbeat=12s") || c.Resources.Limits.Memory().String() != "96Mi" ||
		!reflect.DeepEqual(pod.Tolerations, []corev1.Toleration{{Key: "node-role.kubernetes.io/control-plane", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}}) ||
		pod.NodeSelector["consumergroup.io/members"] != "true" || pod.PriorityClassName != "system-node-critical" {
		t.Errorf("the node agent's values did not land: pull %s, args %q, memory limit %s, tolerations %+v, node selector %v, priority class %q",
			c.ImagePullPolicy, c.Args, c.Resources.Limits.Memory(), pod.Tolerations, pod.NodeSelector, pod.PriorityClassName)
	}
	// The operator caches the release namespace, where it keeps the node views, as a watched one: its
	// rules are bound there too, once, whether or not watchNamespaces name it.
	for _, watched := range [][]any{{"orders", "payments"}, {"orders", "ops"}} {
		objs := renderChart(t, map[string]any{"nodeAgent": map[string]any{"enabled": true}, "watchNamespaces": watched}, "ops")
		var bindings []rbacv1.RoleBinding
		for _, o := range objs {
			if o.GetKind() == "RoleBinding" && o.GetNamespace() == "ops" && o.GetName() == "cgo-consumergroup-operator-manager" {
				var b rbacv1.RoleBinding
				as(t, o, &b)
				bindings = append(bindings, b)
			}
		}
		dep, _ := container(t, objs)
		operator := []rbacv1.Subject{{Kind: "ServiceAccount", Name: dep.Spec.Template.Spec.ServiceAccountName, Namespace: "ops"}}
		if len(bindings) != 1 || bindings[0].RoleRef != (rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cgo-consumergroup-operator-manager"}) ||
			!reflect.DeepEqual(bindings[0].Subjects, operator) {
			t.Errorf("watching %v: the manager's RoleBindings in the release namespace %+v, want one, of its ClusterRole to %+v", watched, bindings, operator)
		}
	}
}
