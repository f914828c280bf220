//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/consumergroup-operator/consumergroup-operator/internal/testenv"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/allocate"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/protocol"
)

// restartTemplate changes a pod template as `kubectl rollout restart` does.
func restartTemplate(t *testing.T, obj client.Object) {
	t.Helper()
	patch := fmt.Sprintf(`{"spec":{"template":{"metadata":{"annotations":{"kubectl.kubernetes.io/restartedAt":%q}}}}}`, time.Now().Format(time.RFC3339Nano))
	testenv.Must(t, admin.Patch(context.Background(), obj, client.RawPatch(types.StrategicMergePatchType, []byte(patch))))
}

// podsOf lists app's pods in ns that are not being deleted.
func podsOf(t *testing.T, ns, app string) (live []corev1.Pod, all int) {
	t.Helper()
	var pods corev1.PodList
	testenv.Must(t, admin.List(context.Background(), &pods, client.InNamespace(ns), client.MatchingLabels{"app": app}))
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil {
			live = append(live, p)
		}
	}
	return live, len(pods.Items)
}

// TestDeploymentRolloutRestart restarts a 12-replica Deployment (25% maxSurge and maxUnavailable) whose
// pods form a Cooperative Sticky group: the ReplicaSet controller replaces the pods a few at a time, kwok
// ends the old ones within their grace period, and each old pod's consumer drains meanwhile. No queue may
// ever be read by two members, as the members' own records tell.
func TestDeploymentRolloutRestart(t *testing.T) {
	const app, replicas, queues = "orders", 12, 60
	ns := namespace(t)
	f, dep := settledDeployment(t, ns, app, replicas, queues)
	before := map[string]bool{}
	live, _ := podsOf(t, ns, app)
	for _, p := range live {
		before[string(p.UID)] = true
	}

	gen0, writes0, start := generation(t, ns, app), operatorWrites.Writes(), time.Now()
	restartTemplate(t, dep)
	testenv.Poll(t, 3*time.Minute, 100*time.Millisecond, nil, func() error {
		testenv.Must(t, admin.Get(context.Background(), client.ObjectKeyFromObject(dep), dep))
		s := dep.Status
		if s.ObservedGeneration < dep.Generation || s.UpdatedReplicas != replicas || s.Replicas != replicas || s.AvailableReplicas != replicas {
			return fmt.Errorf("rollout: %+v", s)
		}
		live, all := podsOf(t, ns, app)
		for _, p := range live {
			if before[string(p.UID)] {
				return fmt.Errorf("pod %s not replaced yet", p.Name)
			}
		}
		if all != replicas {
			return fmt.Errorf("%d pods, %d of them terminating", all, all-len(live))
		}
		return nil
	})
	settled(t, ns, app, replicas, time.Minute, f)
	rollout := time.Since(start)
	f.checkNoDoubleReaders(t)

	gens, writes := generation(t, ns, app)-gen0, operatorWrites.Writes()-writes0
	drainErrs := 0
	for _, d := range f.drained() {
		if d.err != nil {
			drainErrs++
		}
	}
	if drainErrs > 0 {
		t.Errorf("%d of the replaced pods' drains did not finish within their grace period", drainErrs)
	}
	t.Logf("rollout restart of %d pods: %s; longest time a queue had no reader: %s; %d generations published; %.1f operator writes per replaced pod; %d holdings",
		replicas, rollout.Round(time.Millisecond), f.own.LongestGap().Round(time.Millisecond), gens, float64(writes)/replicas, f.own.Holdings())
}

// TestRolloutWithAssignmentDeleted restarts a 12-replica Deployment, as TestDeploymentRolloutRestart
// does, and deletes the group's assignment ConfigMaps six times, about 2 s apart, while the old pods
// drain: each time the operator has lost what it published, revocations included, and must publish again
// from what the members claim (docs/protocol.md, "When what the operator wrote is lost"). No queue may be
// read by two members, as their own records tell, and none may go unread for more than 15 s: a queue
// nobody claims waits for every incarnation whose claim stands to acknowledge the recovery, and the old
// pods that drained say in their Leases that they stopped, so the wait ends once the live members have
// acknowledged, not a promise after each deletion (16-17 s before they said so).
func TestRolloutWithAssignmentDeleted(t *testing.T) {
	const app, replicas, queues, deletions = "ledger", 12, 60, 6
	const maxUnread = 15 * time.Second
	ns := namespace(t)
	f, dep := settledDeployment(t, ns, app, replicas, queues)

	start := time.Now()
	restartTemplate(t, dep)
	deleted := 0
	for deleted < deletions {
		// Once the operator has published again (and the rollout has had time to move on), delete
		// everything it published.
		var cms corev1.ConfigMapList
		testenv.Poll(t, time.Minute, 100*time.Millisecond, nil, func() error {
			testenv.Must(t, admin.List(context.Background(), &cms, client.InNamespace(ns), client.MatchingLabels{protocol.GroupLabel: app}))
			if len(cms.Items) == 0 {
				return fmt.Errorf("not published again yet")
			}
			return nil
		})
		time.Sleep(2 * time.Second)
		for i := range cms.Items {
			if err := admin.Delete(context.Background(), &cms.Items[i]); err != nil && !apierrors.IsNotFound(err) {
				t.Fatal(err)
			}
		}
		deleted++
		t.Logf("%v (%s): deleted the assignment's %d ConfigMaps (%d of %d)", time.Since(start).Round(time.Millisecond),
			time.Now().Format("15:04:05.000"), len(cms.Items), deleted, deletions)
	}
	testenv.Poll(t, 3*time.Minute, 100*time.Millisecond, nil, func() error {
		testenv.Must(t, admin.Get(context.Background(), client.ObjectKeyFromObject(dep), dep))
		s := dep.Status
		if s.ObservedGeneration < dep.Generation || s.UpdatedReplicas != replicas || s.Replicas != replicas || s.AvailableReplicas != replicas {
			return fmt.Errorf("rollout: %+v", s)
		}
		return nil
	})
	settled(t, ns, app, replicas, 2*time.Minute, f)
	f.checkNoDoubleReaders(t)
	g := f.own.Longest()
	t.Logf("rollout restart of %d pods with the assignment deleted %d times: %s; %d holdings; longest time a queue had no reader: %s (%v to %v after the restart)",
		replicas, deletions, time.Since(start).Round(time.Millisecond), f.own.Holdings(), g, g.From.Sub(start).Round(time.Millisecond),
		g.To.Sub(start).Round(time.Millisecond))
	if g.Length() > maxUnread {
		t.Errorf("a queue went unread for %s, more than %s", g.Length().Round(time.Millisecond), maxUnread)
	}
}

// TestStatefulSetRollingUpdate updates a StatefulSet whose group keeps a departed member's queues for it
// (restartGraceSeconds) longer than a pod takes to come back: the StatefulSet controller replaces the pods
// one at a time, in reverse ordinal order, under the same names. Each pod gets exactly its own queues
// back, nobody else reads them meanwhile, and nothing else moves.
func TestStatefulSetRollingUpdate(t *testing.T) {
	const app, replicas, queues = "ledger", 4, 24
	ns := namespace(t)
	f := runFleet(t, ns, app, app)
	g := group(ns, app, queues)
	grace := int32(60)
	g.Spec.Handoff.RestartGraceSeconds = &grace
	testenv.Must(t, admin.Create(context.Background(), g))
	n := int32(replicas)
	sts := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: app},
		Spec: appsv1.StatefulSetSpec{
			Replicas:            &n,
			Selector:            &metav1.LabelSelector{MatchLabels: map[string]string{"app": app}},
			Template:            podTemplate(app, 5),
			PodManagementPolicy: appsv1.OrderedReadyPodManagement,
			UpdateStrategy:      appsv1.StatefulSetUpdateStrategy{Type: appsv1.RollingUpdateStatefulSetStrategyType},
		},
	}
	testenv.Must(t, admin.Create(context.Background(), sts))
	settled(t, ns, app, replicas, 2*time.Minute, f)

	// Whose queue is whose, by pod name; from now on every application of an assignment must stay within it.
	owner := map[allocate.Queue]string{}
	live, _ := podsOf(t, ns, app)
	for _, p := range live {
		for _, q := range f.own.Reading(p.Name + "/" + string(p.UID)) {
			owner[q] = p.Name
		}
	}
	if len(owner) != queues {
		t.Fatalf("%d queues read before the update, want %d", len(owner), queues)
	}
	var mu sync.Mutex
	var strays []string
	f.own.Observe(func(reader string, qs []allocate.Queue) {
		pod, _, _ := strings.Cut(reader, "/")
		for _, q := range qs {
			if owner[q] != pod {
				mu.Lock()
				strays = append(strays, fmt.Sprintf("%s read %s, which was %s's", reader, q, owner[q]))
				mu.Unlock()
			}
		}
	})

	gen0 := generation(t, ns, app)
	restartTemplate(t, sts)
	testenv.Poll(t, 3*time.Minute, 100*time.Millisecond, nil, func() error {
		testenv.Must(t, admin.Get(context.Background(), client.ObjectKeyFromObject(sts), sts))
		s := sts.Status
		if s.ObservedGeneration < sts.Generation || s.UpdatedReplicas != replicas || s.ReadyReplicas != replicas || s.CurrentRevision != s.UpdateRevision {
			return fmt.Errorf("rolling update: %+v", s)
		}
		return nil
	})
	settled(t, ns, app, replicas, time.Minute, f)
	f.checkNoDoubleReaders(t)
	mu.Lock()
	defer mu.Unlock()
	if len(strays) > 0 {
		t.Fatalf("%d queues went to another pod during the update:\n%s", len(strays), strings.Join(strays[:min(len(strays), 20)], "\n"))
	}
	live, _ = podsOf(t, ns, app)
	for _, p := range live {
		got := f.own.Reading(p.Name + "/" + string(p.UID))
		for _, q := range got {
			if owner[q] != p.Name {
				t.Errorf("%s reads %s, which was %s's", p.Name, q, owner[q])
			}
		}
		want := 0
		for _, o := range owner {
			if o == p.Name {
				want++
			}
		}
		if len(got) != want {
			t.Errorf("%s reads %d queues, it read %d before the update", p.Name, len(got), want)
		}
	}
	t.Logf("rolling update of %d StatefulSet pods: %d generations published; longest time a queue had no reader: %s",
		replicas, generation(t, ns, app)-gen0, f.own.LongestGap().Round(time.Millisecond))
}

// TestScaleToZeroAndBack scales the consumers' Deployment to zero: the group says it has no members, and
// recovers when the Deployment scales up again.
func TestScaleToZeroAndBack(t *testing.T) {
	const app = "audit"
	ns := namespace(t)
	f := runFleet(t, ns, app, app)
	testenv.Must(t, admin.Create(context.Background(), group(ns, app, 12)))
	dep := deployment(ns, app, 3)
	testenv.Must(t, admin.Create(context.Background(), dep))
	settled(t, ns, app, 3, 2*time.Minute, f)

	scale(t, dep, 0)
	waitCondition(t, ns, app, "Ready", metav1.ConditionFalse, "NoMembers")
	testenv.Eventually(t, time.Minute, func() error {
		if n := f.consumers.Running(); n != 0 {
			return fmt.Errorf("%d consumers still running", n)
		}
		return nil
	})
	scale(t, dep, 3)
	settled(t, ns, app, 3, 2*time.Minute, f)
	waitCondition(t, ns, app, "Ready", metav1.ConditionTrue, "")
	f.checkNoDoubleReaders(t)
}

func scale(t *testing.T, dep *appsv1.Deployment, replicas int32) {
	t.Helper()
	patch := fmt.Sprintf(`{"spec":{"replicas":%d}}`, replicas)
	testenv.Must(t, admin.Patch(context.Background(), dep, client.RawPatch(types.MergePatchType, []byte(patch))))
}

// waitCondition waits until the group's condition has status and, when reason is not empty, reason.
func waitCondition(t *testing.T, ns, name, condition string, status metav1.ConditionStatus, reason string) {
	t.Helper()
	testenv.Eventually(t, time.Minute, func() error {
		g := group(ns, name, 0)
		if err := admin.Get(context.Background(), client.ObjectKeyFromObject(g), g); err != nil {
			return err
		}
		for _, c := range g.Status.Conditions {
			if c.Type == condition {
				if c.Status != status || (reason != "" && c.Reason != reason) || c.ObservedGeneration != g.Generation {
					return fmt.Errorf("%s is %s (%s)", condition, c.Status, c.Reason)
				}
				return nil
			}
		}
		return fmt.Errorf("no %s condition", condition)
	})
}

// gone tells whether obj no longer exists.
func gone(obj client.Object) error {
	err := admin.Get(context.Background(), client.ObjectKeyFromObject(obj), obj)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	return fmt.Errorf("%T %s still exists", obj, obj.GetName())
}
