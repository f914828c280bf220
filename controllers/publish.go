package controllers

import (
	"context"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/consumergroup-operator/consumergroup-operator/api/v1alpha1"
	"github.com/consumergroup-operator/consumergroup-operator/internal/plan"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/protocol"
)

// Event reasons that are not condition reasons.
const (
	EventRebalanced   = "Rebalanced"
	EventMemberFenced = "MemberFenced"
	EventRestored     = "AssignmentRestored"
)

// FieldOwner is the field manager of everything the operator writes.
const FieldOwner = "consumergroup-operator"

// writeStatus writes the group's status when it changed. Reconcile calls it after the assignment is
// written, since the status reports what is published, and for the group's first generation also before.
// The status is where the generation is remembered should the ConfigMap be deleted; a generation published
// just before the operator stopped, and never recorded here, is covered by the step a recovery takes
// (recoveryStep). A status that changes only members' acknowledgements within AckStatusInterval of the
// last write is not written: writeStatus returns how long it waits (plan.StatusWriteWait), for the pass
// to come back then.
func (r *ConsumerGroupReconciler) writeStatus(ctx context.Context, group *v1alpha1.ConsumerGroup, rep *plan.Report, now time.Time) (time.Duration, error) {
	status := plan.StatusFor(group, rep, metav1.NewTime(now))
	if equality.Semantic.DeepEqual(group.Status, status) {
		return 0, nil
	}
	key := client.ObjectKeyFromObject(group)
	if wait := plan.StatusWriteWait(&group.Status, &status, r.memory.statusWrittenAt(key), now, r.AckStatusInterval); wait > 0 {
		return wait, nil
	}
	updated := group.DeepCopy()
	updated.Status = status
	if err := r.Status().Update(ctx, updated, client.FieldOwner(FieldOwner)); err != nil {
		return 0, err
	}
	r.memory.statusWritten(key, now)
	group.Status = status
	return 0, nil
}

// publish writes the decided ConfigMaps in the order protocol.Layout gives (shards before the index),
// each created or updated whole against the version observed, so that a write never lands on a version it
// did not decide from; then it deletes unused shards and the Leases whose claims no longer stand.
func (r *ConsumerGroupReconciler) publish(ctx context.Context, group *v1alpha1.ConsumerGroup, obs *plan.Observation, w plan.Writes) error {
	for _, part := range w.ConfigMaps {
		observed := obs.Shards[part.Name]
		if part.Name == protocol.AssignmentName(group.Name) {
			observed = obs.Index
		}
		if err := r.writeConfigMap(ctx, group, observed, part); err != nil {
			return fmt.Errorf("writing ConfigMap %s: %w", part.Name, err)
		}
	}
	for _, cm := range w.DeleteShards {
		err := r.Delete(ctx, cm, client.Preconditions{UID: &cm.UID, ResourceVersion: &cm.ResourceVersion})
		if client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("deleting shard %s: %w", cm.Name, err)
		}
	}
	for _, l := range w.DeleteLeases {
		lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: group.Namespace, Name: l.Name}}
		// Only the version decided from: a Lease renewed or taken over since stays.
		err := r.Delete(ctx, lease, client.Preconditions{UID: &l.UID, ResourceVersion: &l.ResourceVersion})
		if client.IgnoreNotFound(err) != nil && !apierrors.IsConflict(err) {
			return fmt.Errorf("deleting Lease %s: %w", l.Name, err)
		}
	}
	return nil
}

// writeConfigMap makes the ConfigMap hold part: created when none was observed, otherwise updated from
// the observed version. Labels and annotations of others stay; data is the operator's alone.
func (r *ConsumerGroupReconciler) writeConfigMap(ctx context.Context, group *v1alpha1.ConsumerGroup, observed *corev1.ConfigMap, part protocol.Part) error {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: group.Namespace, Name: part.Name}}
	if observed != nil {
		cm = observed.DeepCopy()
	}
	if cm.Labels == nil {
		cm.Labels = map[string]string{}
	}
	cm.Labels[protocol.GroupLabel] = group.Name
	cm.Labels[protocol.ManagedByLabel] = protocol.ManagedByValue
	if cm.Annotations == nil {
		cm.Annotations = map[string]string{}
	}
	for _, k := range plan.OwnAnnotations {
		delete(cm.Annotations, k)
	}
	maps.Copy(cm.Annotations, part.Annotations)
	cm.Data, cm.BinaryData = part.Data, nil
	cm.OwnerReferences = []metav1.OwnerReference{{
		APIVersion: v1alpha1.GroupVersion.String(), Kind: "ConsumerGroup", Name: group.Name, UID: group.UID,
		Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true),
	}}
	if observed == nil {
		return r.Create(ctx, cm, client.FieldOwner(FieldOwner))
	}
	return r.Update(ctx, cm, client.FieldOwner(FieldOwner))
}

// emitEvents reports the pass in events, after the writes: a rebalance, objects found deleted or edited,
// a new problem, fenced members.
func (r *ConsumerGroupReconciler) emitEvents(group *v1alpha1.ConsumerGroup, old *v1alpha1.ConsumerGroupStatus, d *plan.Decision) {
	switch {
	case d.Report.Tampered.LostPublished() && (len(d.Write.ConfigMaps) > 0 || !says(old, v1alpha1.ConditionTampered, d.Report.Tampered.Message)):
		r.Recorder.Eventf(group, nil, corev1.EventTypeWarning, d.Report.Tampered.Reason, "Restore", "%s. Published generation %d",
			d.Report.Tampered.Message, d.Report.Generation)
	case d.Report.Rebalance.Published:
		var load string
		if d.Report.Rebalance.MovedLoad > 0 {
			load = " (load " + strconv.FormatFloat(d.Report.Rebalance.MovedLoad, 'g', 4, 64) + ")"
		}
		r.Recorder.Eventf(group, nil, corev1.EventTypeNormal, EventRebalanced, "Publish",
			"Published assignment generation %d: %s over %s, %s moved%s",
			d.Report.Generation, count(d.Report.QueueCount, "queue"), count(len(d.Report.Members), "member"), count(d.Report.Rebalance.Moved, "queue"), load)
	}
	// A claim that cannot be read is reported when first seen, and again if another Lease joins it.
	if c := d.Report.UnreadableClaims; c != nil && !says(old, v1alpha1.ConditionTampered, c.Message) {
		r.Recorder.Eventf(group, nil, corev1.EventTypeWarning, c.Reason, "Hold", "%s", c.Message)
	}
	if c := d.Report.SuspectLeases; c != nil && !says(old, v1alpha1.ConditionTampered, c.Message) {
		r.Recorder.Eventf(group, nil, corev1.EventTypeWarning, c.Reason, "Distrust", "%s", c.Message)
	}
	if len(d.Report.Restored) > 0 {
		r.Recorder.Eventf(group, nil, corev1.EventTypeWarning, EventRestored, "Restore", "Someone changed what the operator wrote; restored: %s",
			strings.Join(d.Report.Restored, "; "))
	}
	// One warning per distinct problem, not one per pass.
	if d.Report.Problem != nil {
		if c := meta.FindStatusCondition(old.Conditions, v1alpha1.ConditionDegraded); c == nil || c.Status != metav1.ConditionTrue ||
			c.Reason != d.Report.Problem.Reason || !strings.HasPrefix(c.Message, d.Report.Problem.Message) {
			r.Recorder.Eventf(group, nil, corev1.EventTypeWarning, d.Report.Problem.Reason, "Plan", "%s", d.Report.Problem.Message)
		}
	}
	for _, f := range d.Report.Handoff.Fenced {
		r.Recorder.Eventf(group, nil, corev1.EventTypeWarning, EventMemberFenced, "Handoff",
			"Pod %s did not acknowledge generation %d within %ds while it kept renewing its Lease; its revoked queues were handed on",
			f.Pod, f.Generation, plan.DurationOr(group.Spec.Handoff.RevokeTimeoutSeconds, plan.DefaultRevokeTimeout)/time.Second)
	}
}

// says reports whether the status held condition typ True with message.
func says(status *v1alpha1.ConsumerGroupStatus, typ, message string) bool {
	c := meta.FindStatusCondition(status.Conditions, typ)
	return c != nil && c.Status == metav1.ConditionTrue && c.Message == message
}

// count writes n and noun, plural unless n is 1: "1 queue", "3 queues".
func count(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return strconv.Itoa(n) + " " + noun + "s"
}
