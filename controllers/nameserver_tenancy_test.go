//go:build envtest

package controllers

import (
	"context"
	"encoding/pem"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/consumergroup-operator/consumergroup-operator/api/v1alpha1"
	"github.com/consumergroup-operator/consumergroup-operator/internal/rocketmqstandin"
	"github.com/consumergroup-operator/consumergroup-operator/internal/testenv"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/nameserver"
)

// allowedLabel is the namespace label the tests' ClusterNameServers select.
const allowedLabel = "messaging.consumergroup.io/rocketmq"

// clusterNameServer creates a ClusterNameServer named after the test and name, dialling addrs within
// cidrs, for the namespaces selector selects, and deletes it when the test ends.
func clusterNameServer(t *testing.T, name string, addrs, cidrs []string, selector metav1.LabelSelector, mutate ...func(*v1alpha1.ClusterNameServerSpec)) *v1alpha1.ClusterNameServer {
	t.Helper()
	cns := &v1alpha1.ClusterNameServer{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%d", name, nsCounter.Add(1))},
		Spec: v1alpha1.ClusterNameServerSpec{Addresses: addrs, NamespaceSelector: selector,
			AllowedDestinations: v1alpha1.AllowedDestinations{CIDRs: cidrs}},
	}
	for _, m := range mutate {
		m(&cns.Spec)
	}
	must(t, k8s.Create(context.Background(), cns))
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), cns) })
	return cns
}

// labelledNamespace is a new namespace with labels.
func labelledNamespace(t *testing.T, labels map[string]string) string {
	t.Helper()
	ns := newNamespace(t)
	var n corev1.Namespace
	must(t, k8s.Get(context.Background(), client.ObjectKey{Name: ns}, &n))
	n.Labels = labels
	must(t, k8s.Update(context.Background(), &n))
	return ns
}

// namedGroup is a group in ns whose topic "t" is discovered from the ClusterNameServer cns.
func namedGroup(ns, name, cns string) *v1alpha1.ConsumerGroup {
	g := testenv.Group(ns, name).Obj()
	g.Spec.Topics = []v1alpha1.Topic{{Name: "t"}}
	g.Spec.NameServer = &v1alpha1.NameServer{ClusterNameServer: cns, RetryTopic: v1alpha1.RetryTopicIgnore}
	return g
}

// tenantClient is a client of a user who may create and read ConsumerGroups in ns, and nothing else:
// not a Secret.
func tenantClient(t *testing.T, ns string) client.Client {
	t.Helper()
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "tenant"}, Rules: []rbacv1.PolicyRule{{
		APIGroups: []string{v1alpha1.GroupVersion.Group}, Resources: []string{"consumergroups"}, Verbs: []string{"get", "list", "create", "update", "delete"},
	}}}
	must(t, k8s.Create(context.Background(), role))
	must(t, k8s.Create(context.Background(), &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "tenant"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "tenant"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "tenant"}}}))
	cfg := rest.CopyConfig(restConfig)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "tenant"}
	c, err := client.New(cfg, client.Options{Scheme: testScheme})
	must(t, err)
	return c
}

// staleFor waits until group reports TopologyStale for reason, and returns the condition's message,
// checked to be within maxRouteMessage.
func staleFor(t *testing.T, ns, group, reason string) string {
	t.Helper()
	g := waitForCondition(t, ns, group, v1alpha1.ConditionTopologyStale, metav1.ConditionTrue, reason)
	c := meta.FindStatusCondition(g.Status.Conditions, v1alpha1.ConditionTopologyStale)
	if len(c.Message) > maxRouteMessage {
		t.Errorf("%s: a message of %d bytes", group, len(c.Message))
	}
	return c.Message
}

// TestClusterNameServerValidation checks the ClusterNameServer's OpenAPI and CEL rules against the real
// API server: each bad spec is refused with a message that names the field.
func TestClusterNameServerValidation(t *testing.T) {
	valid := func() *v1alpha1.ClusterNameServer {
		return &v1alpha1.ClusterNameServer{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("v-%d", nsCounter.Add(1))},
			Spec: v1alpha1.ClusterNameServerSpec{Addresses: []string{"namesrv.rocketmq.svc:9876"},
				AllowedDestinations: v1alpha1.AllowedDestinations{CIDRs: []string{"10.0.0.0/8"}}}}
	}
	for _, tc := range []struct {
		name   string
		mutate func(*v1alpha1.ClusterNameServerSpec)
		want   string
	}{
		{"addresses and a service", func(s *v1alpha1.ClusterNameServerSpec) {
			s.Service = &v1alpha1.ClusterNameServerService{Namespace: "rocketmq", Name: "namesrv"}
		}, "spec: set exactly one of addresses or service"},
		{"no destination", func(s *v1alpha1.ClusterNameServerSpec) { s.AllowedDestinations.CIDRs = nil }, "spec.allowedDestinations.cidrs"},
		{"not a CIDR", func(s *v1alpha1.ClusterNameServerSpec) { s.AllowedDestinations.CIDRs = []string{"10.0.0.0/33"} }, "each item must be a CIDR"},
		{"port 0", func(s *v1alpha1.ClusterNameServerSpec) { s.AllowedDestinations.Ports = []int32{0} }, "spec.allowedDestinations.ports[0]"},
		{"refresh every 5 s", func(s *v1alpha1.ClusterNameServerSpec) { s.RefreshIntervalSeconds = ptr.To[int32](5) }, "spec.refreshIntervalSeconds"},
		{"credentials in clear", func(s *v1alpha1.ClusterNameServerSpec) { s.CredentialsSecret = "acl" }, "spec.credentialsSecret: credentials are sent over TLS only"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cns := valid()
			tc.mutate(&cns.Spec)
			err := k8s.Create(context.Background(), cns)
			if err == nil {
				_ = k8s.Delete(context.Background(), cns)
				t.Fatalf("the API server accepted the spec; want an error naming %q", tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not contain %q", err, tc.want)
			}
		})
	}
	cns := valid()
	cns.Spec.CredentialsSecret, cns.Spec.AllowPlaintextCredentials = "acl", true
	must(t, k8s.Create(context.Background(), cns))
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), cns) })
}

// TestTenantCannotAimTheOperator: a tenant who may create ConsumerGroups but read no Secret tries to make
// the operator dial a listener of its own, with a Secret of its namespace it cannot read, and to use name
// servers it was not given. Nothing is dialled, nothing is read for it, and each group says why with a
// reason and a fixed sentence; a group whose namespace was given the name servers reads them all the
// while, and the tenant's namespace, once labelled, reads them too.
func TestTenantCannotAimTheOperator(t *testing.T) {
	good := rocketmqstandin.Start(t)
	good.SetTopic("t", rocketmqstandin.Broker{Name: "b", Queues: 4})
	target := rocketmqstandin.Start(t) // the tenant's own listener
	target.SetTopic("t", rocketmqstandin.Broker{Name: "b", Queues: 4})
	allowed := labelledNamespace(t, map[string]string{allowedLabel: "allowed"})
	tenant := newNamespace(t)
	creds := newNamespace(t)
	must(t, k8s.Create(context.Background(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: tenant, Name: "victim"},
		Data: map[string][]byte{"accessKey": []byte("ak"), "secretKey": []byte("sk")}}))

	selectAllowed := metav1.LabelSelector{MatchLabels: map[string]string{allowedLabel: "allowed"}}
	shared := clusterNameServer(t, "shared", []string{good.Addr}, []string{"127.0.0.0/8"}, selectAllowed)
	wide := clusterNameServer(t, "wide", []string{target.Addr}, []string{"0.0.0.0/0"}, metav1.LabelSelector{})
	elsewhere := clusterNameServer(t, "elsewhere", []string{target.Addr}, []string{"10.0.0.0/8"}, metav1.LabelSelector{})

	startManagerFor(t, []string{allowed, tenant}, restConfig, func(r *ConsumerGroupReconciler) {
		r.NameServers = NameServerPolicy{CredentialsNamespace: creds, RefreshInterval: time.Second}
	})
	as := tenantClient(t, tenant)
	if err := as.Get(context.Background(), client.ObjectKey{Namespace: tenant, Name: "victim"}, &corev1.Secret{}); !apierrors.IsForbidden(err) {
		t.Fatalf("the tenant reads the Secret: %v", err)
	}
	inline := namedGroup(tenant, "inline", "")
	inline.Spec.NameServer = &v1alpha1.NameServer{Addresses: []string{target.Addr}, CredentialsSecret: "victim", RetryTopic: v1alpha1.RetryTopicIgnore}
	for _, g := range []*v1alpha1.ConsumerGroup{
		inline,
		namedGroup(tenant, "not-chosen", shared.Name),
		namedGroup(tenant, "wide", wide.Name),
		namedGroup(tenant, "elsewhere", elsewhere.Name),
		namedGroup(tenant, "missing", "no-such-name-server"),
	} {
		must(t, as.Create(context.Background(), g))
	}
	must(t, k8s.Create(context.Background(), namedGroup(allowed, "reader", shared.Name)))

	for _, tc := range []struct{ group, reason, says string }{
		{"inline", nameserver.ReasonNotAllowed, sentenceInlineOff},
		{"not-chosen", nameserver.ReasonNotAllowed, fmt.Sprintf(sentenceNotChosen, shared.Name)},
		{"wide", nameserver.ReasonNotAllowed, (&nameserver.Error{Reason: nameserver.ReasonNotAllowed}).Sentence()},
		{"elsewhere", nameserver.ReasonNotAllowed, (&nameserver.Error{Reason: nameserver.ReasonNotAllowed}).Sentence()},
		{"missing", v1alpha1.ReasonNameServerNotFound, fmt.Sprintf(sentenceNotFound, "no-such-name-server")},
	} {
		if msg := staleFor(t, tenant, tc.group, tc.reason); !strings.Contains(msg, tc.says) {
			t.Errorf("%s: the condition says %q, want %q", tc.group, msg, tc.says)
		}
		if g := getGroup(t, tenant, tc.group); g.Status.QueueCount != 0 {
			t.Errorf("%s: %d queues", tc.group, g.Status.QueueCount)
		}
	}
	waitForCondition(t, allowed, "reader", v1alpha1.ConditionTopologyStale, metav1.ConditionFalse, v1alpha1.ReasonRoutesFresh)
	// The administrator sees, on each ClusterNameServer, whether its last read reached a name server.
	for _, tc := range []struct {
		cns    *v1alpha1.ClusterNameServer
		status metav1.ConditionStatus
		reason string
	}{
		{shared, metav1.ConditionTrue, v1alpha1.ReasonNameServerAnswered},
		{elsewhere, metav1.ConditionFalse, nameserver.ReasonNotAllowed},
		{wide, metav1.ConditionFalse, nameserver.ReasonNotAllowed},
	} {
		eventually(t, waitFor, func() error {
			var got v1alpha1.ClusterNameServer
			must(t, k8s.Get(context.Background(), client.ObjectKeyFromObject(tc.cns), &got))
			c := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ClusterNameServerReady)
			if c == nil || c.Status != tc.status || c.Reason != tc.reason || c.ObservedGeneration != got.Generation {
				return fmt.Errorf("%s: Ready is %+v, want %s/%s", got.Name, c, tc.status, tc.reason)
			}
			return nil
		})
	}
	time.Sleep(2 * time.Second) // two more refresh intervals
	if n := target.Accepted(); n != 0 {
		t.Fatalf("the tenant's listener was dialled %d times", n)
	}
	waitForCondition(t, allowed, "reader", v1alpha1.ConditionTopologyStale, metav1.ConditionFalse, v1alpha1.ReasonRoutesFresh)

	// The administrator gives the tenant's namespace the shared name servers: its group reads them.
	var n corev1.Namespace
	must(t, k8s.Get(context.Background(), client.ObjectKey{Name: tenant}, &n))
	n.Labels = map[string]string{allowedLabel: "allowed"}
	must(t, k8s.Update(context.Background(), &n))
	waitForCondition(t, tenant, "not-chosen", v1alpha1.ConditionTopologyStale, metav1.ConditionFalse, v1alpha1.ReasonRoutesFresh)
	if n := target.Accepted(); n != 0 {
		t.Fatalf("the tenant's listener was dialled %d times", n)
	}
}

// TestClusterNameServerCredentialsAndTLS: a ClusterNameServer's credentials and CA come from the
// credentials namespace only, never from the group's, and credentials go to the name servers signed
// over TLS.
func TestClusterNameServerCredentialsAndTLS(t *testing.T) {
	serverTLS, _ := rocketmqstandin.Certificates(t)
	nsrv := rocketmqstandin.StartTLS(t, serverTLS)
	nsrv.SetTopic("t", rocketmqstandin.Broker{Name: "b", Queues: 4})
	ns, creds := newNamespace(t), newNamespace(t)
	acl := func(namespace string) *corev1.Secret {
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "acl"},
			Data: map[string][]byte{"accessKey": []byte("ak"), "secretKey": []byte("sk")}}
	}
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: serverTLS.Certificates[0].Certificate[1]})
	ca := func(namespace string) *corev1.Secret {
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "ca"}, Data: map[string][]byte{"ca.crt": caPEM}}
	}
	// In the group's namespace, where a tenant could have put them: not read.
	must(t, k8s.Create(context.Background(), acl(ns)))
	must(t, k8s.Create(context.Background(), ca(ns)))
	cns := clusterNameServer(t, "acl", []string{nsrv.Addr}, []string{"127.0.0.1/32"}, metav1.LabelSelector{}, func(s *v1alpha1.ClusterNameServerSpec) {
		s.CredentialsSecret = "acl"
		s.TLS = &v1alpha1.NameServerTLS{CASecret: "ca"}
	})
	startManager(t, ns, func(r *ConsumerGroupReconciler) {
		r.NameServers = NameServerPolicy{CredentialsNamespace: creds, RefreshInterval: time.Second}
	})
	must(t, k8s.Create(context.Background(), namedGroup(ns, "acl", cns.Name)))
	if msg := staleFor(t, ns, "acl", nameserver.ReasonDenied); !strings.Contains(msg, "credentials Secret cannot be read") {
		t.Errorf("the condition says %q", msg)
	}
	must(t, k8s.Create(context.Background(), acl(creds)))
	eventually(t, waitFor, func() error {
		if msg := staleFor(t, ns, "acl", nameserver.ReasonDenied); !strings.Contains(msg, "CA Secret cannot be read") {
			return fmt.Errorf("the condition says %q", msg)
		}
		return nil
	})
	if n := nsrv.Accepted(); n != 0 {
		t.Fatalf("the name server was dialled %d times before the credentials namespace held the Secrets", n)
	}
	must(t, k8s.Create(context.Background(), ca(creds)))
	waitForCondition(t, ns, "acl", v1alpha1.ConditionTopologyStale, metav1.ConditionFalse, v1alpha1.ReasonRoutesFresh)
	req := nsrv.LastRequest()
	check := nameserver.RouteRequest("t", req.Opaque)
	(&nameserver.Credentials{AccessKey: "ak", SecretKey: "sk"}).Sign(&check, nil)
	if req.ExtFields["Signature"] != check.ExtFields["Signature"] {
		t.Fatalf("request header fields %v, want them signed as %v", req.ExtFields, check.ExtFields)
	}
}

// TestGroupsOnOneSourceShareReads: 200 groups in two namespaces read one topic from one
// ClusterNameServer. Once they hold its routes, the name server is asked for the topic once per refresh
// interval, not once per group, and no group's status is written while the routes stay the same.
func TestGroupsOnOneSourceShareReads(t *testing.T) {
	nsrv := rocketmqstandin.Start(t)
	nsrv.SetTopic("t", rocketmqstandin.Broker{Name: "b", Queues: 4})
	namespaces := []string{newNamespace(t), newNamespace(t)}
	cns := clusterNameServer(t, "shared", []string{nsrv.Addr}, []string{"127.0.0.0/8"}, metav1.LabelSelector{})
	const interval, groups = 2 * time.Second, 200
	startManagerFor(t, namespaces, restConfig, func(r *ConsumerGroupReconciler) {
		r.NameServers = NameServerPolicy{RefreshInterval: interval}
	})
	for i := range groups {
		must(t, k8s.Create(context.Background(), namedGroup(namespaces[i%2], fmt.Sprintf("g%d", i), cns.Name)))
	}
	eventually(t, 2*waitFor, func() error {
		for _, ns := range namespaces {
			var list v1alpha1.ConsumerGroupList
			if err := k8s.List(context.Background(), &list, client.InNamespace(ns)); err != nil {
				return err
			}
			for _, g := range list.Items {
				if r := g.Status.Routes; r == nil || len(r.Topics) != 1 || len(r.Topics[0].Brokers) != 1 {
					return fmt.Errorf("%s/%s has routes %+v", ns, g.Name, r)
				}
			}
		}
		return nil
	})
	// The groups' first passes, which record the routes and then the assignment, are over by now.
	time.Sleep(2 * interval)
	versions := map[string]string{}
	for _, ns := range namespaces {
		var list v1alpha1.ConsumerGroupList
		must(t, k8s.List(context.Background(), &list, client.InNamespace(ns)))
		for _, g := range list.Items {
			versions[ns+"/"+g.Name] = g.ResourceVersion
		}
	}
	before := nsrv.Requests("t")
	const window = 5 * interval
	time.Sleep(window)
	asked := nsrv.Requests("t") - before
	t.Logf("%d groups: the topic was asked %d times in %v, with a refresh interval of %v; %d times before", groups, asked, window, interval, before)
	// Each namespace reads on its own: one read per namespace per interval.
	if want := len(namespaces) * (int(window/interval) + 1); asked > want {
		t.Errorf("the topic was asked %d times in %v; want at most %d, one per namespace and refresh interval", asked, window, want)
	}
	changed := 0
	for _, ns := range namespaces {
		var list v1alpha1.ConsumerGroupList
		must(t, k8s.List(context.Background(), &list, client.InNamespace(ns)))
		for _, g := range list.Items {
			if versions[ns+"/"+g.Name] != g.ResourceVersion {
				changed++
			}
		}
	}
	if changed > 0 {
		t.Errorf("%d of %d groups were written while their routes stayed the same", changed, groups)
	}
}

// hungListener accepts connections, reads what comes and never answers; it counts the connections
// accepted and those the other side closed.
type hungListener struct {
	addr             string
	accepted, closed atomic.Int32
}

func startHungListener(t *testing.T) *hungListener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	h := &hungListener{addr: ln.Addr().String()}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			h.accepted.Add(1)
			go func() {
				defer func() { _ = c.Close() }()
				buf := make([]byte, 512)
				for {
					if _, err := c.Read(buf); err != nil {
						h.closed.Add(1)
						return
					}
				}
			}()
		}
	}()
	return h
}

// TestSlowNameServersOfOneNamespaceLeaveSlotsForAnother: six groups of one namespace read from six name
// servers that never answer, each read taking its whole 20 s timeout. At most two of them are in flight
// at once, and a group of another namespace reads its name server within seconds: with every slot
// taken by the first namespace, it would wait 20 s.
func TestSlowNameServersOfOneNamespaceLeaveSlotsForAnother(t *testing.T) {
	slow, other := newNamespace(t), newNamespace(t)
	startManagerFor(t, []string{slow, other}, restConfig, inlineNameServers(), func(r *ConsumerGroupReconciler) {
		r.NameServers.MaxReads, r.NameServers.MaxReadsPerNamespace = 4, 2
		r.NameServerTimeout = 20 * time.Second
	})
	var hung []*hungListener
	for i := range 6 {
		h := startHungListener(t)
		hung = append(hung, h)
		must(t, k8s.Create(context.Background(), discoveredGroup(slow, fmt.Sprintf("slow-%d", i), []string{h.addr}, v1alpha1.RetryTopicIgnore)))
	}
	dialled := func() int {
		n := 0
		for _, h := range hung {
			n += int(h.accepted.Load())
		}
		return n
	}
	eventually(t, waitFor, func() error {
		if n := dialled(); n < 2 {
			return fmt.Errorf("%d slow name servers dialled", n)
		}
		return nil
	})
	good := rocketmqstandin.Start(t)
	good.SetTopic("t", rocketmqstandin.Broker{Name: "b", Queues: 4})
	start := time.Now()
	must(t, k8s.Create(context.Background(), discoveredGroup(other, "quick", []string{good.Addr}, v1alpha1.RetryTopicIgnore)))
	testenv.Poll(t, 8*time.Second, 50*time.Millisecond, func() string { return "the other namespace's group has not read its routes" }, func() error {
		if r := getGroup(t, other, "quick").Status.Routes; r == nil || r.ReadTime == nil {
			return fmt.Errorf("no routes yet")
		}
		return nil
	})
	t.Logf("the other namespace's routes were read %v after its group was created", time.Since(start).Round(time.Millisecond))
	if n := dialled(); n != 2 {
		t.Errorf("%d slow name servers were dialled at once; want 2, the per-namespace bound", n)
	}
}

// TestManyTopicsOfOneNamespaceDoNotDelayAnother: the groups of one namespace list 1,024 topics of a
// ClusterNameServer that takes 30 ms to answer each, so each of that namespace's reads runs into its 30 s
// budget. A group of another namespace, created while such a read is in flight, reads its topic from the
// same ClusterNameServer within a second or two: a read shared by both namespaces would keep it waiting
// until the long read ends.
func TestManyTopicsOfOneNamespaceDoNotDelayAnother(t *testing.T) {
	nsrv := rocketmqstandin.Start(t)
	nsrv.SetTopic("t", rocketmqstandin.Broker{Name: "b", Queues: 4})
	nsrv.SetLatency(30 * time.Millisecond)
	heavy, light := newNamespace(t), newNamespace(t)
	cns := clusterNameServer(t, "busy", []string{nsrv.Addr}, []string{"127.0.0.0/8"}, metav1.LabelSelector{})
	startManagerFor(t, []string{heavy, light}, restConfig, func(r *ConsumerGroupReconciler) {
		r.NameServers = NameServerPolicy{RefreshInterval: 2 * time.Second}
	})
	const groups, topics = 4, 256
	for g := range groups {
		group := namedGroup(heavy, fmt.Sprintf("many-%d", g), cns.Name)
		group.Spec.Topics = nil
		for i := range topics {
			group.Spec.Topics = append(group.Spec.Topics, v1alpha1.Topic{Name: fmt.Sprintf("h%d-%03d", g, i)})
		}
		must(t, k8s.Create(context.Background(), group))
	}
	first := "h0-000"
	eventually(t, waitFor, func() error {
		if nsrv.Requests(first) == 0 {
			return fmt.Errorf("the many topics are not being read yet")
		}
		return nil
	})
	start := time.Now()
	must(t, k8s.Create(context.Background(), namedGroup(light, "few", cns.Name)))
	testenv.Poll(t, 10*time.Second, 20*time.Millisecond, func() string { return "the other namespace's group has not read its routes" }, func() error {
		if r := getGroup(t, light, "few").Status.Routes; r == nil || r.ReadTime == nil {
			return fmt.Errorf("no routes yet")
		}
		return nil
	})
	took := time.Since(start)
	// The first namespace's groups are read in no set order, so what shows that its read was still under
	// way is how many of its topics had been asked, not whether one particular topic had.
	done := asked(nsrv, groups, topics)
	t.Logf("the other namespace's routes were read %v after its group was created, while %d of the %d topics of the first read were asked",
		took.Round(time.Millisecond), done, groups*topics)
	if took > 5*time.Second {
		t.Errorf("the other namespace's routes took %v; want a few seconds at most", took)
	}
	if done == groups*topics {
		t.Errorf("the first namespace's read ended before the other's group read its routes; the test proves nothing")
	}
}

// asked is how many of the topics h<g>-<i> the stand-in was asked.
func asked(nsrv *rocketmqstandin.NameServer, groups, topics int) int {
	n := 0
	for g := range groups {
		for i := range topics {
			if nsrv.Requests(fmt.Sprintf("h%d-%03d", g, i)) > 0 {
				n++
			}
		}
	}
	return n
}

// TestRemovedGroupCancelsItsRead: a read in flight from a name server that never answers ends when the
// group's spec names another name server, and the read of that one ends when the group is deleted; both
// long before their timeout.
func TestRemovedGroupCancelsItsRead(t *testing.T) {
	ns := newNamespace(t)
	startManager(t, ns, inlineNameServers(), func(r *ConsumerGroupReconciler) { r.NameServerTimeout = 30 * time.Second })
	first, second := startHungListener(t), startHungListener(t)
	g := discoveredGroup(ns, "cancel", []string{first.addr}, v1alpha1.RetryTopicIgnore)
	must(t, k8s.Create(context.Background(), g))
	waitClosed := func(h *hungListener, what string) {
		t.Helper()
		start := time.Now()
		testenv.Poll(t, 5*time.Second, 20*time.Millisecond, func() string { return what + ": the read is still in flight" }, func() error {
			if h.closed.Load() == 0 {
				return fmt.Errorf("open")
			}
			return nil
		})
		t.Logf("%s: the read ended %v later", what, time.Since(start).Round(time.Millisecond))
	}
	eventually(t, waitFor, func() error {
		if first.accepted.Load() == 0 {
			return fmt.Errorf("not dialled yet")
		}
		return nil
	})
	// The operator writes the status meanwhile: each try reads the group anew.
	must(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		got := getGroup(t, ns, g.Name)
		got.Spec.NameServer.Addresses = []string{second.addr}
		return k8s.Update(context.Background(), got)
	}))
	waitClosed(first, "spec changed")
	eventually(t, waitFor, func() error {
		if second.accepted.Load() == 0 {
			return fmt.Errorf("not dialled yet")
		}
		return nil
	})
	must(t, k8s.Delete(context.Background(), getGroup(t, ns, g.Name)))
	waitClosed(second, "group deleted")
}
