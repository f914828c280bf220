//go:build envtest

package member_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/consumergroup-operator/consumergroup-operator/internal/testenv"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/member"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/protocol"
)

// A load report reaches the Lease with the renewals the member makes anyway: however often the
// application reports, the member writes no more often, and it reports only the queues it may read.
func TestReportLoadRidesOnRenewals(t *testing.T) {
	ns := newNamespace(t)
	var writes testenv.WriteCounter
	cfg := rest.CopyConfig(restConfig)
	writes.Wrap(cfg)
	counted, err := kubernetes.NewForConfig(cfg)
	testenv.Must(t, err)
	m := startMember(t, ns, nil, counted) // a 3 s Lease: renewed every second
	publish(t, ns, 1, map[string][]member.Queue{podName: queues(0, 1, 2)})
	eventually(t, 10*time.Second, func() error {
		if g := m.client.Current().Generation; g != 1 {
			return fmt.Errorf("generation %d in force, want 1", g)
		}
		return nil
	})
	testenv.Must(t, m.client.Ack(context.Background(), 1))

	q := queues(0, 1, 2, 9)
	if err := m.client.ReportLoad(map[member.Queue]float64{q[0]: 1, q[1]: -2}); err == nil {
		t.Fatal("ReportLoad accepted a negative load")
	}
	start, before := time.Now(), writes.Writes()
	const reports = 20
	for i := range reports {
		// q[3] is not the member's: it is left out of the report.
		testenv.Must(t, m.client.ReportLoad(map[member.Queue]float64{q[0]: float64(10 + i), q[1]: 2.5, q[3]: 7}))
		time.Sleep(10 * time.Millisecond)
	}
	var reported map[member.Queue]float64
	eventually(t, 10*time.Second, func() error {
		lease, err := cs.CoordinationV1().Leases(ns).Get(context.Background(), protocol.LeaseName(group, podName), metav1.GetOptions{})
		if err != nil {
			return err
		}
		s := protocol.ReadLease(lease)
		if s.LoadErr != nil {
			return s.LoadErr
		}
		reported = s.Load
		if reported[q[0]] != 10+reports-1 {
			return fmt.Errorf("the Lease reports %v, want the last report", reported)
		}
		return nil
	})
	took, wrote := time.Since(start), writes.Writes()-before
	if len(reported) != 2 || reported[q[1]] != 2.5 {
		t.Errorf("the Lease reports %v, want %s at %d and %s at 2.5 only", reported, q[0], 10+reports-1, q[1])
	}
	// One renewal a second, and one more that may have been in flight.
	if renewals := int64(took/time.Second) + 1; wrote > renewals {
		t.Errorf("%d reports in %s cost %d Lease writes; renewals alone make %d", reports, took.Round(time.Millisecond), wrote, renewals)
	}
	if took > 2*time.Second {
		t.Errorf("the report took %s to reach the Lease, more than a renewal interval (1 s) after the last one", took.Round(time.Millisecond))
	}
}
