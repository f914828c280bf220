package protocol

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

// The ConsumerGroup API, as a member Lease names its group as owner. A member pod does not import the
// API's Go types; a test checks these against them.
const (
	GroupAPIVersion = "messaging.consumergroup.io/v1alpha1"
	GroupKind       = "ConsumerGroup"
)

// Liveness. A member renews its Lease every RenewInterval(duration). Once it has not renewed for
// StopAfter(duration), measured from when it sent the last renewal that succeeded, it tells its
// application to read nothing, and the application has the rest of the duration to stop: by the end of
// the duration it reads nothing. Whoever counts on that from the outside (the operator, a new pod under
// the same name) waits longer, by the most the clocks may differ (Expiry).
const (
	// DefaultLeaseDuration is a member Lease's spec.leaseDurationSeconds unless configured otherwise. With
	// a renewal every third of it, 1,000 members write 50 renewals a second. A shorter duration notices a
	// hung or partitioned member sooner at the cost of more writes; see docs/protocol.md.
	DefaultLeaseDuration = 60 * time.Second
	// DefaultNodeModeLeaseDuration is the Lease duration of a member in node mode (docs/protocol.md): its
	// node agent confirms its view, its probe restarts it when it cannot, so its renewals only tell of a
	// member cut off alone without a probe; every 200 s, with the read before each, they cost 0.01
	// requests a second where 60 s costs 0.1.
	DefaultNodeModeLeaseDuration = 10 * time.Minute
	// DefaultMaxClockSkew is how far the clocks of a member pod and of a reader of its Lease may differ.
	// Every guarantee that rests on a Lease expiring assumes the clocks differ by less.
	DefaultMaxClockSkew = 5 * time.Second
	// MaxLeaseDuration caps the duration a reader takes from a Lease, so that an edited Lease cannot make
	// a claim stand for ever.
	MaxLeaseDuration = time.Hour
)

// Contact fencing. A member confirms every ContactInterval(timeout) that it has seen the newest version of
// each assignment ConfigMap it watches, by reading their resourceVersions from the API server (a
// linearizable read of metadata only). Once it has not confirmed for the contact timeout, measured from
// when it sent the last read that confirmed, it tells its application to read nothing; the application
// then has its stop timeout to stop. Their sum is the member's promise (StopsWithinAnnotation): a queue
// the operator published away from the member at time P is not read by it after P plus that sum, on any
// clock that runs at the rate of the member's, since every read the member sent after P saw it.
const (
	// DefaultContactTimeout is how long a member reads without confirming that its view is current.
	DefaultContactTimeout = 4 * time.Second
	// DefaultStopTimeout is how long an application takes, at most, to stop reading a queue once its
	// member hands it an assignment without the queue, or generation 0.
	DefaultStopTimeout = 2 * time.Second
	// MaxStopsWithin caps the promise a reader takes from a Lease: a longer one is ignored.
	MaxStopsWithin = 5 * time.Minute
)

// ContactInterval is how often a member with the given contact timeout confirms its view: four reads per
// timeout, so that a slow or failed read costs nothing.
func ContactInterval(timeout time.Duration) time.Duration { return timeout / 4 }

// RenewInterval is how often a member renews a Lease of the given duration.
func RenewInterval(duration time.Duration) time.Duration { return duration / 3 }

// StopAfter is how long after its last renewal a member that could not renew again tells its application
// to read nothing: two renewal intervals, so that one failed renewal costs nothing, and a third of the
// duration left for the application to stop, as a leader-election client stops leading at its renew
// deadline, before its lease runs out.
func StopAfter(duration time.Duration) time.Duration { return duration - RenewInterval(duration) }

// LeaseState is what a member's Lease says, as a reader of it sees it.
type LeaseState struct {
	// Name, UID and ResourceVersion identify the Lease object, for a conditional delete.
	Name            string
	UID             types.UID
	ResourceVersion string
	// Pod and PodUID are the pod incarnation that holds the Lease: the claim's, or for a protocol-1
	// member's Lease, its pod owner reference. Empty when neither can be read.
	Pod    string
	PodUID types.UID
	// Member is the member id (spec.holderIdentity).
	Member string
	// AckedGeneration is the last generation the member applied; 0 when none or unreadable.
	AckedGeneration int64
	// RenewTime is when the member last showed it was alive; AcquireTime when this incarnation took the
	// Lease. Each falls back on an earlier time when unset, never on none.
	RenewTime   time.Time
	AcquireTime time.Time
	// RenewedBy is the latest time the member can have renewed, for telling whether it is late, and only
	// for that: RenewTime as read. A reader that times renewals on its own clock sets it earlier when it
	// saw the renewal only after the fact (the operator, after it starts).
	RenewedBy time.Time
	// Duration is how long after RenewTime the member counts itself alive, capped at MaxLeaseDuration.
	Duration time.Duration
	// HasClaim is false for a protocol-1 member, whose Lease carries no claim.
	HasClaim bool
	// Claim lists the queues the member may be reading, when HasClaim and ClaimErr is nil.
	Claim []Queue
	// ClaimErr says why the claim cannot be read: the reader must count it as covering every queue.
	ClaimErr error
	// Load is the load the member reports per queue; nil when it reports none. LoadErr says why the
	// report cannot be read; a reader then treats the member as reporting none.
	Load    map[Queue]float64
	LoadErr error
	// Outside counts the queues the claim and the load report list outside the reader's Scope: read
	// through ReadLeaseIn, they are counted, never listed.
	Outside int
	// StopsWithin is the member's contact-fencing promise (StopsWithinAnnotation); 0 when it makes none
	// or the annotation cannot be read.
	StopsWithin time.Duration
	// Stopped is the member's own word that it has stopped for good (StoppedAnnotation), with a claim
	// that reads and lists nothing, inside the reader's scope or out.
	Stopped bool
	// ThroughNodeAgent is the member's word that it confirms its view through its node's agent
	// (ConfirmsThroughAnnotation), and so fences itself when the agent stops answering.
	ThroughNodeAgent bool
}

// ReadLease reads a member's Lease.
func ReadLease(lease *coordinationv1.Lease) LeaseState { return ReadLeaseIn(lease, nil) }

// ReadLeaseIn reads a member's Lease, listing only the queues of scope in its claim and load report
// (Scope.Expand): what it costs to read is bounded by the group's spec, whatever the Lease says.
func ReadLeaseIn(lease *coordinationv1.Lease, scope *Scope) LeaseState {
	s := ReadLeaseTerms(lease)
	acked, err := strconv.ParseInt(lease.Annotations[AckedGenerationAnnotation], 10, 64)
	if err == nil && acked > 0 && acked <= MaxGeneration {
		s.AckedGeneration = acked
	}
	if raw, ok := lease.Annotations[LoadAnnotation]; ok {
		s.Load, s.Outside, s.LoadErr = DecodeLoadIn(raw, scope)
	}
	raw, ok := lease.Annotations[ClaimAnnotation]
	if !ok {
		return s
	}
	s.HasClaim = true
	claim, queues, err := DecodeClaimIn(raw, scope)
	if err != nil {
		s.ClaimErr = err
		return s
	}
	if s.PodUID != "" && types.UID(claim.PodUID) != s.PodUID {
		s.ClaimErr = fmt.Errorf("the claim is for pod UID %s, the Lease's owner is pod UID %s", claim.PodUID, s.PodUID)
		return s
	}
	s.PodUID = types.UID(claim.PodUID)
	s.Claim = queues.Queues
	s.Outside += queues.Outside
	// The two records of the acknowledged generation should agree; if someone changed one, believe the
	// lower, which claims less progress.
	s.AckedGeneration = min(s.AckedGeneration, claim.Acked)
	s.Stopped = lease.Annotations[StoppedAnnotation] == "true" && len(s.Claim) == 0 && s.Outside == 0
	return s
}

// ReadLeaseTerms reads what a member's Lease says of its member's life, without its claim, load report
// or acknowledgement: its pod (by the owner reference, else PodAnnotation), its member, its times, its
// duration and its promise. It is what decides when the member stops being one, and costs no decoding.
func ReadLeaseTerms(lease *coordinationv1.Lease) LeaseState {
	s := LeaseState{Name: lease.Name, UID: lease.UID, ResourceVersion: lease.ResourceVersion, Duration: DefaultLeaseDuration}
	for _, ref := range lease.OwnerReferences {
		if IsPodOwner(ref) {
			s.Pod, s.PodUID = ref.Name, ref.UID
		}
	}
	if s.Pod == "" {
		s.Pod = leasePod(lease)
	}
	if lease.Spec.HolderIdentity != nil {
		s.Member = *lease.Spec.HolderIdentity
	}
	s.AcquireTime, s.RenewTime = times(lease)
	s.RenewedBy = s.RenewTime
	if d := lease.Spec.LeaseDurationSeconds; d != nil && *d > 0 {
		s.Duration = min(time.Duration(*d)*time.Second, MaxLeaseDuration)
	}
	s.StopsWithin = stopsWithin(lease.Annotations[StopsWithinAnnotation])
	s.ThroughNodeAgent = lease.Annotations[ConfirmsThroughAnnotation] == ConfirmsThroughNodeAgent
	return s
}

// stopsWithin reads a StopsWithinAnnotation: whole seconds from 1 to MaxStopsWithin, else no promise.
func stopsWithin(raw string) time.Duration {
	n, err := strconv.Atoi(raw)
	if err != nil || n < 1 || time.Duration(n)*time.Second > MaxStopsWithin {
		return 0
	}
	return time.Duration(n) * time.Second
}

// RenewTimeOf is when lease says its holder last showed it was alive: LeaseState.RenewTime.
func RenewTimeOf(lease *coordinationv1.Lease) time.Time {
	_, renew := times(lease)
	return renew
}

// times are lease's acquire and renew times, each falling back on an earlier one when unset.
func times(lease *coordinationv1.Lease) (acquire, renew time.Time) {
	acquire = lease.CreationTimestamp.Time
	if t := lease.Spec.AcquireTime; t != nil {
		acquire = t.Time
	}
	renew = acquire
	if t := lease.Spec.RenewTime; t != nil {
		renew = t.Time
	}
	return acquire, renew
}

// leasePod names the pod of a Lease whose pod owner reference is gone (the garbage collector removes it
// once the pod is deleted): PodAnnotation, else, for a Lease written before the annotation, what follows
// "<group>." in its name, else its name. It is never empty, so that a claim standing after its pod went
// is still somebody's.
func leasePod(lease *coordinationv1.Lease) string {
	if pod := lease.Annotations[PodAnnotation]; pod != "" {
		return pod
	}
	if group := lease.Labels[GroupLabel]; group != "" {
		if pod, ok := strings.CutPrefix(lease.Name, group+"."); ok && pod != "" {
			return pod
		}
	}
	return lease.Name
}

// Expiry is when a reader stops counting on the member's claim: the last renewal, plus the lease
// duration, plus maxSkew. The member's application has stopped reading a lease duration after the member
// sent that renewal, by the member's clock (StopAfter), and it sent it before the renewTime it wrote, so
// when the clocks differ by less than maxSkew the application has stopped by then.
func (s LeaseState) Expiry(maxSkew time.Duration) time.Time {
	return s.RenewTime.Add(s.Duration + maxSkew)
}

// Stands reports whether the member's claim still stands at now: the Lease has not expired (Expiry).
func (s LeaseState) Stands(now time.Time, maxSkew time.Duration) bool {
	return now.Before(s.Expiry(maxSkew))
}

// Released reports whether the Lease shows that its member reads nothing: a readable claim that lists no
// queue.
func (s LeaseState) Released() bool {
	return s.HasClaim && s.ClaimErr == nil && len(s.Claim) == 0
}

// MemberLease is what a member writes into its Lease. Every write carries all of it, so that an edit by
// someone else is repaired by the member's next write.
type MemberLease struct {
	Group string
	// GroupUID is the ConsumerGroup's UID, named as an owner of the Lease once the member knows it (from
	// the assignment ConfigMap's controller; GroupUIDOf). With the pod and the group as owners, the
	// garbage collector deletes the Lease only once both are gone: the Lease outlives its pod, so that
	// its claim stands until it expires; the operator deletes it after that.
	GroupUID types.UID
	Pod      string
	PodUID   types.UID
	// Member is the member id, written as spec.holderIdentity.
	Member   string
	Duration time.Duration
	// Acked is the last generation the application acknowledged.
	Acked int64
	// Claim is every queue the member may be reading.
	Claim []Queue
	// Load is the load the member reports per queue (CheckLoad); none when empty.
	Load map[Queue]float64
	// StopsWithin is the member's contact-fencing promise, rounded up to whole seconds; none when 0.
	StopsWithin time.Duration
	// Stopped says that the member has stopped for good (StoppedAnnotation); written only with an empty
	// claim.
	Stopped bool
	// ThroughNodeAgent says that the member confirms its view through its node's agent
	// (ConfirmsThroughAnnotation).
	ThroughNodeAgent bool
}

func (m MemberLease) ownerReferences() []metav1.OwnerReference {
	refs := []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: m.Pod, UID: m.PodUID}}
	if m.GroupUID != "" {
		refs = append(refs, metav1.OwnerReference{APIVersion: GroupAPIVersion, Kind: GroupKind, Name: m.Group, UID: m.GroupUID})
	}
	// Neither is a controller reference nor blocks deletion: that would need permission to update the
	// owners' finalizers, which a consumer pod has no reason to hold.
	return refs
}

func (m MemberLease) annotations() map[string]string {
	a := map[string]string{
		AckedGenerationAnnotation: strconv.FormatInt(m.Acked, 10),
		ClaimAnnotation:           NewClaim(string(m.PodUID), m.Acked, m.Claim).Encode(),
		PodAnnotation:             m.Pod,
	}
	if m.StopsWithin > 0 {
		a[StopsWithinAnnotation] = strconv.FormatInt(int64((m.StopsWithin+time.Second-1)/time.Second), 10)
	}
	if m.Stopped && len(m.Claim) == 0 {
		a[StoppedAnnotation] = "true"
	}
	if m.ThroughNodeAgent {
		a[ConfirmsThroughAnnotation] = ConfirmsThroughNodeAgent
	}
	return a
}

// Apply writes m into lease (a new one when nil) and returns it: name, namespace, label, annotations,
// owners, holder and duration, and the acquire and renew times that are not nil. A member writes its
// Lease whole, from the object it last wrote or read, with an optimistic update: a write never clobbers a
// Lease another incarnation has taken over meanwhile.
func (m MemberLease) Apply(lease *coordinationv1.Lease, namespace string, acquireAt, renewAt *time.Time) *coordinationv1.Lease {
	if lease == nil {
		lease = &coordinationv1.Lease{}
	}
	lease.Name, lease.Namespace = LeaseName(m.Group, m.Pod), namespace
	if lease.Labels == nil {
		lease.Labels = map[string]string{}
	}
	lease.Labels[GroupLabel] = m.Group
	if lease.Annotations == nil {
		lease.Annotations = map[string]string{}
	}
	delete(lease.Annotations, StopsWithinAnnotation)
	delete(lease.Annotations, StoppedAnnotation)
	delete(lease.Annotations, ConfirmsThroughAnnotation)
	for k, v := range m.annotations() {
		lease.Annotations[k] = v
	}
	if len(m.Load) > 0 {
		lease.Annotations[LoadAnnotation] = NewLoadReport(m.Load).Encode()
	} else {
		delete(lease.Annotations, LoadAnnotation)
	}
	lease.OwnerReferences = m.ownerReferences()
	lease.Spec.HolderIdentity = ptr.To(m.Member)
	lease.Spec.LeaseDurationSeconds = ptr.To(int32(m.Duration / time.Second))
	if acquireAt != nil {
		lease.Spec.AcquireTime = ptr.To(metav1.NewMicroTime(*acquireAt))
	}
	if renewAt != nil {
		lease.Spec.RenewTime = ptr.To(metav1.NewMicroTime(*renewAt))
	}
	return lease
}

// IsPodOwner reports whether ref names a pod: the owner reference of a member Lease that says whose it is
// (ReadLeaseIn, HeldBy).
func IsPodOwner(ref metav1.OwnerReference) bool {
	return ref.APIVersion == "v1" && ref.Kind == "Pod"
}

// HeldBy reports whether lease belongs to the pod incarnation podUID: its pod owner or its claim names it.
// A member writes a Lease only while it holds it; another incarnation's Lease it may only take over.
func HeldBy(lease *coordinationv1.Lease, podUID types.UID) bool {
	for _, ref := range lease.OwnerReferences {
		if IsPodOwner(ref) && ref.UID == podUID {
			return true
		}
	}
	if raw, ok := lease.Annotations[ClaimAnnotation]; ok {
		if c, _, err := DecodeClaim(raw); err == nil && types.UID(c.PodUID) == podUID {
			return true
		}
	}
	return false
}
