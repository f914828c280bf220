//go:build envtest

package member_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/consumergroup-operator/consumergroup-operator/pkg/member"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/protocol"
)

// readLease reads the member's Lease as the operator does.
func readLease(t testing.TB, ns string) (protocol.LeaseState, *coordinationv1.Lease) {
	t.Helper()
	lease, err := cs.CoordinationV1().Leases(ns).Get(context.Background(), protocol.LeaseName(group, podName), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return protocol.ReadLease(lease), lease
}

// claims checks that the member's Lease claims exactly want, acknowledging acked.
func claims(t testing.TB, ns string, acked int64, want []member.Queue) func() error {
	return func() error {
		s, _ := readLease(t, ns)
		if s.ClaimErr != nil || s.AckedGeneration != acked || fmt.Sprint(s.Claim) != fmt.Sprint(want) {
			return fmt.Errorf("the Lease acknowledges %d and claims %v (%v), want %d and %v", s.AckedGeneration, s.Claim, s.ClaimErr, acked, want)
		}
		return nil
	}
}

func TestClaimCoversWhatTheApplicationMayRead(t *testing.T) {
	ns := newNamespace(t)
	m := startMember(t, ns, nil, nil)
	publish(t, ns, 1, map[string][]member.Queue{podName: queues(0, 1)})
	eventually(t, 10*time.Second, inForce(m.client, 1, queues(0, 1)))
	must(t, m.client.Ack(context.Background(), 1))
	eventually(t, 10*time.Second, claims(t, ns, 1, queues(0, 1)))

	// Generation 2 moves the pod from 0-1 to 1-2. Until the application acknowledges it, it may read
	// either: the next renewal claims both.
	publish(t, ns, 2, map[string][]member.Queue{podName: queues(1, 2)})
	eventually(t, 10*time.Second, inForce(m.client, 2, queues(1, 2)))
	eventually(t, 10*time.Second, claims(t, ns, 1, queues(0, 1, 2)))
	must(t, m.client.Ack(context.Background(), 2))
	eventually(t, 10*time.Second, claims(t, ns, 2, queues(1, 2)))
}

func TestEntryOfAnotherPodUnderTheSameNameIsNotRead(t *testing.T) {
	ns := newNamespace(t)
	m := startMember(t, ns, nil, nil)
	testenvPublish(t, ns, 3, map[string]types.UID{podName: "uid-of-an-earlier-pod"}, queues(0, 1))
	eventually(t, 10*time.Second, inForce(m.client, 3, nil))
}

func TestAnOlderOrEditedCopyOfTheAssignmentIsNotActedOn(t *testing.T) {
	ns := newNamespace(t)
	m := startMember(t, ns, nil, nil)
	publish(t, ns, 5, map[string][]member.Queue{podName: queues(0)})
	eventually(t, 10*time.Second, inForce(m.client, 5, queues(0)))
	// Someone restores an older copy (a backup, a GitOps tool): generation 4 gives the pod other queues.
	publish(t, ns, 4, map[string][]member.Queue{podName: queues(7)})
	// And then edits generation 5 by hand, with a valid checksum even.
	publish(t, ns, 5, map[string][]member.Queue{podName: queues(8)})
	time.Sleep(time.Second)
	if err := inForce(m.client, 5, queues(0))(); err != nil {
		t.Fatal(err)
	}
	publish(t, ns, 6, map[string][]member.Queue{podName: queues(9)})
	eventually(t, 10*time.Second, inForce(m.client, 6, queues(9)))
}

func TestEntryOfAnUnknownFormatHoldsNothing(t *testing.T) {
	ns := newNamespace(t)
	m := startMember(t, ns, nil, nil)
	publish(t, ns, 1, map[string][]member.Queue{podName: queues(0)})
	eventually(t, 10*time.Second, inForce(m.client, 1, queues(0)))
	cm, err := cs.CoreV1().ConfigMaps(ns).Get(context.Background(), protocol.AssignmentName(group), metav1.GetOptions{})
	must(t, err)
	cm.Annotations[protocol.GenerationAnnotation] = "2"
	cm.Data[podName] = `{"version":2,"generation":2,"member":"consumer-0","podUID":"` + string(m.pod.UID) + `","queues":[]}`
	_, err = cs.CoreV1().ConfigMaps(ns).Update(context.Background(), cm, metav1.UpdateOptions{})
	must(t, err)
	eventually(t, 10*time.Second, inForce(m.client, 0, nil))
	if reason := m.client.Status().Reason; !strings.Contains(reason, "format version 2") {
		t.Fatalf("reason %q does not name the unknown version", reason)
	}
}

// TestWorksWithAProtocol1Operator publishes as a protocol-1 operator did (no pod UID, no checksum, no
// digest) and checks that the member reads its entry and writes what such an operator reads: the
// acknowledged generation, and the pod as the Lease's owner.
func TestWorksWithAProtocol1Operator(t *testing.T) {
	ns := newNamespace(t)
	m := startMember(t, ns, nil, nil)
	_, err := cs.CoreV1().ConfigMaps(ns).Create(context.Background(), &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: protocol.AssignmentName(group), Annotations: map[string]string{protocol.GenerationAnnotation: "3"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: protocol.GroupAPIVersion, Kind: protocol.GroupKind, Name: group, UID: groupUID, Controller: ptr.To(true)}}},
		Data: map[string]string{podName: `{"version":1,"generation":3,"member":"consumer-0","queues":[{"topic":"orders","broker":"broker-a","ids":"0-2"}]}`},
	}, metav1.CreateOptions{})
	must(t, err)
	eventually(t, 10*time.Second, inForce(m.client, 3, queues(0, 1, 2)))
	must(t, m.client.Ack(context.Background(), 3))
	eventually(t, 10*time.Second, func() error {
		_, lease := readLease(t, ns)
		if lease.Annotations[protocol.AckedGenerationAnnotation] != "3" {
			return fmt.Errorf("acked-generation %q", lease.Annotations[protocol.AckedGenerationAnnotation])
		}
		for _, ref := range lease.OwnerReferences {
			if ref.Kind == "Pod" && ref.UID == m.pod.UID {
				return nil
			}
		}
		return fmt.Errorf("the pod is not among the Lease's owners %v", lease.OwnerReferences)
	})
}

// TestANewPodWaitsForTheClaimOfTheOldOne: a pod created under the name of one whose process may still run
// does not take its Lease, nor read anything, until the old claim no longer stands; an old pod that
// released everything hands the Lease over at once.
func TestANewPodWaitsForTheClaimOfTheOldOne(t *testing.T) {
	for _, tc := range []struct {
		name  string
		claim []member.Queue
		wait  bool
	}{{"claim stands", queues(0, 1), true}, {"released", nil, false}} {
		t.Run(tc.name, func(t *testing.T) {
			ns := newNamespace(t)
			// The Lease an earlier pod of this name wrote a moment ago, with a 3 s duration.
			now := time.Now()
			old := protocol.MemberLease{Group: group, GroupUID: groupUID, Pod: podName, PodUID: "uid-of-the-earlier-pod", Member: podName,
				Duration: 3 * time.Second, Acked: 1, Claim: tc.claim}
			_, err := cs.CoordinationV1().Leases(ns).Create(context.Background(), old.Apply(nil, ns, &now, &now), metav1.CreateOptions{})
			must(t, err)
			m := startMember(t, ns, func(c *member.Config) { c.MaxClockSkew = 500 * time.Millisecond }, nil)
			publish(t, ns, 2, map[string][]member.Queue{podName: queues(0, 1)})
			if tc.wait {
				time.Sleep(2 * time.Second)
				if a := m.client.Current(); a.Generation != 0 || !strings.Contains(m.client.Status().Reason, "earlier pod") {
					t.Fatalf("within the old claim the new pod has %+v in force (%s)", a, m.client.Status().Reason)
				}
				if s, _ := readLease(t, ns); s.PodUID != "uid-of-the-earlier-pod" {
					t.Fatalf("the new pod took the Lease over while the old claim stands")
				}
			}
			eventually(t, 10*time.Second, inForce(m.client, 2, queues(0, 1)))
			elapsed := time.Since(now)
			if s, _ := readLease(t, ns); s.PodUID != m.pod.UID {
				t.Fatalf("the Lease is held by %s, want the new pod", s.PodUID)
			}
			if tc.wait && elapsed < 3500*time.Millisecond {
				t.Fatalf("the new pod read after %v, before the old claim lapsed (3 s + 0.5 s)", elapsed)
			}
		})
	}
}

// testenvPublish publishes queues for each pod with the given UID.
func testenvPublish(t testing.TB, ns string, generation int64, uids map[string]types.UID, qs []member.Queue) {
	t.Helper()
	a := map[string][]member.Queue{}
	for pod := range uids {
		a[pod] = qs
	}
	publishWithUIDs(t, ns, generation, uids, a)
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
