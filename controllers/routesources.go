package controllers

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/consumergroup-operator/consumergroup-operator/api/v1alpha1"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/nameserver"
)

// The operator reads ClusterNameServers, and namespaces' labels to match their namespaceSelector. It reads
// Secrets only in the credentials namespace, through a Role of its own (config/rbac/credentials_role.yaml),
// and, when inline name servers are on, in the groups' namespaces, through a ClusterRole the administrator
// binds with that choice.
// +kubebuilder:rbac:groups=messaging.consumergroup.io,resources=clusternameservers,verbs=get;list;watch
// +kubebuilder:rbac:groups=messaging.consumergroup.io,resources=clusternameservers/status,verbs=update
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get;list;watch

// NameServerPolicy is what the operator's administrator lets groups read routes from. The zero value is
// the secure default: groups read only from ClusterNameServers that select their namespace, with
// credentials from no namespace at all.
type NameServerPolicy struct {
	// CredentialsNamespace is the one namespace where ClusterNameServers' Secrets (credentials and CA
	// certificates) are read; the operator's RBAC lets it read Secrets there and nowhere else. Empty:
	// a ClusterNameServer that names a Secret is refused (Denied).
	CredentialsNamespace string
	// Inline, when set, honours the name servers a group names in its own spec (addresses or service),
	// dialling only the destinations it allows, with credentials from the group's own namespace. Nil,
	// the default, refuses them: a tenant's group could otherwise make the operator dial any address.
	Inline *nameserver.Egress
	// Forbidden are addresses no egress rule opens unless it lists exactly that address: the API
	// server's.
	Forbidden []netip.Addr
	// MaxReads bounds the reads in flight at once, every source included; defaultMaxReads when zero.
	MaxReads int
	// MaxReadsPerNamespace bounds the reads of one namespace's groups in flight at once, so that one
	// namespace's slow name servers or many topics cannot take every slot; defaultMaxReadsPerNamespace
	// when zero.
	MaxReadsPerNamespace int
	// RefreshInterval, when set, is every source's refresh interval, whatever its object says: for tests,
	// which cannot wait the API's 10 s minimum.
	RefreshInterval time.Duration
}

const (
	defaultMaxReads             = 16
	defaultMaxReadsPerNamespace = 2
)

// routeSource is where and how the groups of one namespace read their routes: one ClusterNameServer, or
// the namespace's inline name servers. A ClusterNameServer is one source per namespace that uses it, so
// that the groups of one namespace share their reads while no namespace's topics, however many, delay
// another's: each namespace's reads take its own slots and its own budget.
type routeSource struct {
	// key names the source: groups with the same key share reads.
	key string
	// version changes whenever anything that reading depends on changes; a read of another version is
	// cancelled.
	version string
	// namespace is the namespace whose groups read from the source, and whose read slots its reads take.
	namespace string
	// name is the ClusterNameServer's name, and generation the generation read; empty for inline.
	name       string
	generation int64
	addrs      []string
	interval   time.Duration
	egress     *nameserver.Egress
	// credentials and ca name Secrets: in the credentials namespace, or the group's own for inline.
	credentials, ca      *types.NamespacedName
	tls                  *v1alpha1.NameServerTLS
	plaintextCredentials bool
	// zones are the source's brokerZones, after the group's own.
	zones []v1alpha1.BrokerZone
}

// Sentences of the reads that never happen. They name only what the tenant wrote or may know.
const (
	sentenceInlineOff = "inline name servers are turned off by the operator's administrator: name a ClusterNameServer in spec.nameServer.clusterNameServer"
	sentenceNotFound  = "the ClusterNameServer %s does not exist"
	sentenceNotChosen = "the ClusterNameServer %s does not select this namespace"
	sentenceNoEgress  = "the ClusterNameServer %s allows no destination it can use"
)

// routeSourceOf resolves where group reads its routes, or the read problem that keeps it from reading.
func (r *routeDiscovery) routeSourceOf(ctx context.Context, group *v1alpha1.ConsumerGroup) (*routeSource, *routeRead, error) {
	spec := group.Spec.NameServer
	if spec.ClusterNameServer == "" {
		if r.NameServers.Inline == nil {
			return nil, readProblem(nameserver.ReasonNotAllowed, sentenceInlineOff), nil
		}
		return r.inlineSource(group), nil, nil
	}
	var cns v1alpha1.ClusterNameServer
	if err := r.Get(ctx, types.NamespacedName{Name: spec.ClusterNameServer}, &cns); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, readProblem(v1alpha1.ReasonNameServerNotFound, fmt.Sprintf(sentenceNotFound, spec.ClusterNameServer)), nil
		}
		return nil, nil, err
	}
	var namespace corev1.Namespace
	if err := r.Get(ctx, types.NamespacedName{Name: group.Namespace}, &namespace); err != nil {
		return nil, nil, err
	}
	if !selectsNamespace(&cns, &namespace) {
		return nil, readProblem(nameserver.ReasonNotAllowed, fmt.Sprintf(sentenceNotChosen, cns.Name)), nil
	}
	src, ok := r.clusterSource(&cns, group.Namespace)
	if !ok {
		return nil, readProblem(nameserver.ReasonNotAllowed, fmt.Sprintf(sentenceNoEgress, cns.Name)), nil
	}
	return src, nil, nil
}

// selectsNamespace reports whether cns lets the groups of namespace read from it. A selector that does
// not parse selects nothing.
func selectsNamespace(cns *v1alpha1.ClusterNameServer, namespace *corev1.Namespace) bool {
	sel, err := metav1.LabelSelectorAsSelector(&cns.Spec.NamespaceSelector)
	return err == nil && sel.Matches(labels.Set(namespace.Labels))
}

// clusterSource is the route source of cns for the groups of namespace; false when its destinations do
// not parse.
func (r *routeDiscovery) clusterSource(cns *v1alpha1.ClusterNameServer, namespace string) (*routeSource, bool) {
	dest := cns.Spec.AllowedDestinations
	egress, err := nameserver.ParseEgress(dest.CIDRs, dest.Ports)
	if err != nil {
		return nil, false
	}
	egress.Forbidden = r.NameServers.Forbidden
	src := &routeSource{
		key:                  "cluster/" + cns.Name + "/" + namespace,
		version:              fmt.Sprintf("%s/%d", cns.UID, cns.Generation),
		namespace:            namespace,
		name:                 cns.Name,
		generation:           cns.Generation,
		addrs:                clusterAddrs(cns),
		interval:             r.refreshInterval(cns.Spec.RefreshIntervalSeconds),
		egress:               egress,
		tls:                  cns.Spec.TLS,
		plaintextCredentials: cns.Spec.AllowPlaintextCredentials,
		zones:                cns.Spec.BrokerZones,
	}
	if name := cns.Spec.CredentialsSecret; name != "" {
		src.credentials = &types.NamespacedName{Namespace: r.NameServers.CredentialsNamespace, Name: name}
	}
	if cns.Spec.TLS != nil && cns.Spec.TLS.CASecret != "" {
		src.ca = &types.NamespacedName{Namespace: r.NameServers.CredentialsNamespace, Name: cns.Spec.TLS.CASecret}
	}
	return src, true
}

// inlineSource is the route source of group's inline name servers. Its key holds everything it is read
// with, so two groups share reads only when they would read alike.
func (r *routeDiscovery) inlineSource(group *v1alpha1.ConsumerGroup) *routeSource {
	spec := group.Spec.NameServer
	src := &routeSource{
		namespace: group.Namespace,
		addrs:     inlineAddrs(group),
		interval:  r.refreshInterval(spec.RefreshIntervalSeconds),
		egress:    r.NameServers.Inline,
		// The administrator who turned inline name servers on accepted that they carry no TLS.
		plaintextCredentials: true,
	}
	if spec.CredentialsSecret != "" {
		src.credentials = &types.NamespacedName{Namespace: group.Namespace, Name: spec.CredentialsSecret}
	}
	h := sha256.Sum256([]byte(strings.Join(src.addrs, ",") + "|" + spec.CredentialsSecret + "|" + src.interval.String()))
	src.key = "inline/" + group.Namespace + "/" + hex.EncodeToString(h[:8])
	src.version = src.key
	return src
}

func (r *routeDiscovery) refreshInterval(seconds *int32) time.Duration {
	if r.NameServers.RefreshInterval > 0 {
		return r.NameServers.RefreshInterval
	}
	return refreshInterval(seconds)
}

// readSource reads topics from src's name servers, with its credentials and TLS if it names any. A
// Secret that cannot be read fails the read (Denied): unsigned requests would only be refused.
func (r *routeDiscovery) readSource(ctx context.Context, src *routeSource, topics []string) *routeRead {
	read := &routeRead{at: r.Clock.Now(), topics: topics}
	c := &nameserver.Client{Dial: r.NameServerDial, Timeout: r.NameServerTimeout, Egress: src.egress,
		PlaintextCredentials: src.plaintextCredentials}
	denied := func(what string, err error) *routeRead {
		log.FromContext(ctx).Info("Cannot read a name server's Secret", "source", src.key, "secret", what, "reason", err.Error())
		read.errs = []*nameserver.Error{{Reason: nameserver.ReasonDenied, Err: sentenceError("the " + what + " Secret cannot be read")}}
		return read
	}
	if src.credentials != nil {
		creds, err := r.credentials(ctx, *src.credentials)
		if err != nil {
			return denied("credentials", err)
		}
		c.Credentials = creds
	}
	if src.tls != nil {
		cfg, err := r.tlsConfig(ctx, src)
		if err != nil {
			return denied("CA", err)
		}
		c.TLS = cfg
	}
	read.answers, read.answeredBy, read.errs = c.Routes(ctx, src.addrs, topics)
	for _, e := range read.errs {
		// The operator's log has the detail; conditions and events only the reason's sentence.
		log.FromContext(ctx).V(1).Info("A name server read failed", "source", src.key, "address", e.Addr, "reason", e.Reason, "error", e.Error())
	}
	read.at = r.Clock.Now()
	return read
}

// credentials reads the Secret name: accessKey, secretKey and, optionally, securityToken.
func (r *routeDiscovery) credentials(ctx context.Context, name types.NamespacedName) (*nameserver.Credentials, error) {
	s, err := r.secret(ctx, name)
	if err != nil {
		return nil, err
	}
	ak, sk := string(s.Data["accessKey"]), string(s.Data["secretKey"])
	if ak == "" || sk == "" {
		return nil, fmt.Errorf("secret %s lacks accessKey or secretKey", name)
	}
	return &nameserver.Credentials{AccessKey: ak, SecretKey: sk, SecurityToken: string(s.Data["securityToken"])}, nil
}

// secret reads the Secret name from the API server, not the cache: the operator watches no Secret. A
// Secret of the credentials namespace has no namespace when none is configured, and is not read.
func (r *routeDiscovery) secret(ctx context.Context, name types.NamespacedName) (*corev1.Secret, error) {
	if name.Namespace == "" {
		return nil, fmt.Errorf("no credentials namespace is configured")
	}
	var s corev1.Secret
	if err := r.APIReader.Get(ctx, name, &s); err != nil {
		return nil, err
	}
	return &s, nil
}

// tlsConfig is the TLS configuration of src: its server name, and the CA of its caSecret or the system's.
func (r *routeDiscovery) tlsConfig(ctx context.Context, src *routeSource) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: src.tls.ServerName}
	if src.ca == nil {
		return cfg, nil
	}
	s, err := r.secret(ctx, *src.ca)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(s.Data["ca.crt"]) {
		return nil, fmt.Errorf("secret %s has no PEM certificate in ca.crt", src.ca)
	}
	cfg.RootCAs = pool
	return cfg, nil
}

// sortedUnion is the sorted set of every name in lists.
func sortedUnion(lists ...[]string) []string {
	var out []string
	for _, l := range lists {
		out = append(out, l...)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// recordClusterNameServer writes, when it changed, the Ready condition of the ClusterNameServer that src
// read: True when a name server answered, else False with the reason of the last failure and its fixed
// sentence. A write that fails is left to the next read.
func (r *routeDiscovery) recordClusterNameServer(ctx context.Context, src *routeSource, read *routeRead) {
	if src.name == "" {
		return
	}
	var cns v1alpha1.ClusterNameServer
	if err := r.Get(ctx, types.NamespacedName{Name: src.name}, &cns); err != nil || cns.Generation != src.generation {
		return
	}
	c := metav1.Condition{Type: v1alpha1.ClusterNameServerReady, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonNameServerAnswered,
		Message: "A name server answered: " + read.answeredBy, ObservedGeneration: cns.Generation, LastTransitionTime: metav1.NewTime(r.Clock.Now())}
	if read.answeredBy == "" {
		c.Status, c.Reason, c.Message = metav1.ConditionFalse, nameserver.ReasonUnreachable, capMessage("No name server answered: "+describeReadErrors(read.errs))
		if n := len(read.errs); n > 0 {
			c.Reason = read.errs[n-1].Reason
		}
	}
	updated := cns.DeepCopy()
	if !meta.SetStatusCondition(&updated.Status.Conditions, c) {
		return
	}
	if err := r.Status().Update(ctx, updated, client.FieldOwner(FieldOwner)); err != nil && ctx.Err() == nil {
		log.FromContext(ctx).V(1).Info("Failed to write a ClusterNameServer's status", "clusterNameServer", src.name, "reason", err.Error())
	}
}
