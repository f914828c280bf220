package member

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"strconv"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
)

// fieldManager names this package in the Lease's managed fields.
const fieldManager = "consumergroup-member"

// leaseLoop renews the Lease every third of its duration, and at once when kicked.
func (c *Client) leaseLoop(ctx context.Context) {
	logger := klog.FromContext(ctx)
	ticker := time.NewTicker(c.renewEvery)
	defer ticker.Stop()
	var failing bool
	for {
		err := c.renew(ctx)
		if ctx.Err() != nil {
			return
		}
		c.mu.Lock()
		c.leaseErr = err
		c.mu.Unlock()
		switch {
		case err != nil && !failing:
			logger.Error(err, "Failed to renew Lease; the member holds no queues once the Lease has not been renewed for its duration",
				"lease", c.leaseName, "leaseDuration", c.cfg.LeaseDuration)
		case err == nil && failing:
			logger.Info("Renewed Lease again", "lease", c.leaseName)
		}
		failing = err != nil
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		case <-c.leaseKick:
		}
	}
}

// renew shows the operator that the member is alive and that its view of the assignment is current.
func (c *Client) renew(ctx context.Context) error {
	if err := c.checkView(ctx); err != nil {
		return err
	}
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	// The renewal covers the member from before the request was sent: the operator's view of renewTime
	// can only be later than this process's.
	sentAt := time.Now()
	c.mu.Lock()
	adopted := c.leaseAdopted
	acked := c.ackedToWriteLocked()
	c.mu.Unlock()

	var err error
	if adopted {
		err = c.patchRenewal(ctx, sentAt, acked)
		if apierrors.IsNotFound(err) {
			err = c.createOrAdoptLease(ctx, sentAt)
		}
	} else {
		err = c.createOrAdoptLease(ctx, sentAt)
	}
	if err != nil {
		return err
	}

	c.mu.Lock()
	defer c.mu.Unlock()
	if adopted && acked != c.acked {
		c.acked = acked
		c.notifyLocked()
	}
	c.renewedAt = sentAt
	c.freshUntil = sentAt.Add(c.cfg.LeaseDuration)
	if c.fenceTimer == nil {
		c.fenceTimer = time.AfterFunc(time.Until(c.freshUntil), c.reevaluate)
	} else {
		c.fenceTimer.Reset(time.Until(c.freshUntil))
	}
	c.evaluateLocked()
	return nil
}

func (c *Client) reevaluate() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.evaluateLocked()
}

// ackedToWriteLocked is the acknowledged generation the Lease should hold: c.acked, or 0 when the
// published generation is below it. That happens only when the group was deleted and created again; the
// old acknowledgement would otherwise claim the new group's first generations.
func (c *Client) ackedToWriteLocked() int64 {
	if c.pub.exists && c.pub.generation < c.acked {
		return 0
	}
	return c.acked
}

// createOrAdoptLease creates the member's Lease, or takes over the one that exists. A Lease this pod
// (same UID) wrote before a container restart keeps its acknowledged generation: the restarted process
// consumes nothing yet, so it still consumes nothing that generation does not give it. A Lease left by an
// earlier pod of the same name starts again from 0.
func (c *Client) createOrAdoptLease(ctx context.Context, now time.Time) error {
	leases := c.cs.CoordinationV1().Leases(c.cfg.Namespace)
	existing, err := leases.Get(ctx, c.leaseName, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		lease := c.desiredLease(&coordinationv1.Lease{}, now, 0)
		lease.Spec.AcquireTime = ptr.To(metav1.NewMicroTime(now))
		if _, err := leases.Create(ctx, lease, metav1.CreateOptions{FieldManager: fieldManager}); err != nil {
			return fmt.Errorf("creating Lease %s: %w", c.leaseName, err)
		}
		c.adopted(0)
		return nil
	case err != nil:
		return fmt.Errorf("reading Lease %s: %w", c.leaseName, err)
	}

	acked := int64(0)
	samePod := false
	for _, ref := range existing.OwnerReferences {
		if ref.Kind == "Pod" && ref.UID == c.cfg.PodUID {
			samePod = true
		}
	}
	if samePod {
		acked = ReadLease(existing).AckedGeneration
	}
	lease := c.desiredLease(existing.DeepCopy(), now, acked)
	if !samePod || lease.Spec.AcquireTime == nil {
		lease.Spec.AcquireTime = ptr.To(metav1.NewMicroTime(now))
	}
	if _, err := leases.Update(ctx, lease, metav1.UpdateOptions{FieldManager: fieldManager}); err != nil {
		return fmt.Errorf("taking over Lease %s: %w", c.leaseName, err)
	}
	c.adopted(acked)
	return nil
}

func (c *Client) adopted(acked int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.leaseAdopted = true
	c.acked = acked
	c.notifyLocked()
}

// desiredLease fills lease with what the protocol asks of a member's Lease.
func (c *Client) desiredLease(lease *coordinationv1.Lease, now time.Time, acked int64) *coordinationv1.Lease {
	lease.Name = c.leaseName
	lease.Namespace = c.cfg.Namespace
	if lease.Labels == nil {
		lease.Labels = map[string]string{}
	}
	lease.Labels[GroupLabel] = c.cfg.Group
	if lease.Annotations == nil {
		lease.Annotations = map[string]string{}
	}
	lease.Annotations[AckedGenerationAnnotation] = strconv.FormatInt(acked, 10)
	// Not a controller reference, and no blockOwnerDeletion: setting it would need permission to update
	// the pod's finalizers, which a consumer pod has no reason to hold.
	lease.OwnerReferences = []metav1.OwnerReference{{
		APIVersion: "v1",
		Kind:       "Pod",
		Name:       c.cfg.Pod,
		UID:        c.cfg.PodUID,
	}}
	lease.Spec.HolderIdentity = ptr.To(c.cfg.MemberID)
	lease.Spec.LeaseDurationSeconds = ptr.To(int32(c.cfg.LeaseDuration / time.Second))
	lease.Spec.RenewTime = ptr.To(metav1.NewMicroTime(now))
	return lease
}

// patchRenewal writes renewTime, and the holder, duration and acknowledged generation so that a hand edit
// of them is repaired within a renewal period.
func (c *Client) patchRenewal(ctx context.Context, now time.Time, acked int64) error {
	patch := map[string]any{
		"metadata": map[string]any{"annotations": map[string]string{AckedGenerationAnnotation: strconv.FormatInt(acked, 10)}},
		"spec": map[string]any{
			"holderIdentity":       c.cfg.MemberID,
			"leaseDurationSeconds": int32(c.cfg.LeaseDuration / time.Second),
			"renewTime":            metav1.NewMicroTime(now),
		},
	}
	return c.patchLease(ctx, patch)
}

func (c *Client) patchAcked(ctx context.Context, generation int64) error {
	return c.patchLease(ctx, map[string]any{
		"metadata": map[string]any{"annotations": map[string]string{AckedGenerationAnnotation: strconv.FormatInt(generation, 10)}},
	})
}

// patchLease merge-patches the Lease: a patch needs no resourceVersion, so renewals and acks never
// conflict with each other; c.writeMu keeps their order.
func (c *Client) patchLease(ctx context.Context, patch map[string]any) error {
	data, err := json.Marshal(patch)
	if err != nil {
		return err
	}
	_, err = c.cs.CoordinationV1().Leases(c.cfg.Namespace).Patch(ctx, c.leaseName, types.MergePatchType, data,
		metav1.PatchOptions{FieldManager: fieldManager})
	return err
}

// checkView fails when the watch of an assignment ConfigMap (the index, and the pod's shard when the
// assignment is sharded) has fallen behind the API server for a whole renewal period: a member that cannot
// see revocations must stop renewing, so that it stops consuming and the operator can count it as gone.
// One difference is normal (an update may be on its way); the same difference at the next renewal, with
// no event from the watch in between, is not.
func (c *Client) checkView(ctx context.Context) error {
	c.mu.Lock()
	if !c.synced {
		c.mu.Unlock()
		return nil
	}
	watched := map[string]string{c.configMapName: resourceVersionOf(c.index)}
	if c.shard.name != "" && c.shard.synced {
		watched[c.shard.name] = resourceVersionOf(c.shard.cm)
	}
	c.mu.Unlock()

	for name := range watched {
		serverRV, err := c.serverResourceVersion(ctx, name)
		if err != nil {
			return fmt.Errorf("reading ConfigMap %s: %w", name, err)
		}
		c.mu.Lock()
		ours := watched[name]
		if name == c.configMapName {
			ours = resourceVersionOf(c.index)
		} else if name == c.shard.name {
			ours = resourceVersionOf(c.shard.cm)
		}
		suspect, wasSuspect := c.suspects[name]
		switch {
		case serverRV == ours:
			delete(c.suspects, name)
		case wasSuspect && suspect == ours:
			c.mu.Unlock()
			return fmt.Errorf("the watch of ConfigMap %s is behind the API server (resourceVersion %q there, %q here) for a whole renewal period",
				name, serverRV, ours)
		default:
			c.suspects[name] = ours
		}
		c.mu.Unlock()
	}
	return nil
}

func resourceVersionOf(cm *corev1.ConfigMap) string {
	if cm == nil {
		return ""
	}
	return cm.ResourceVersion
}

// partialObjectMetadata asks the API server for an object's metadata only: the ConfigMap's data can be
// most of a megabyte, and the check runs every renewal period in every member pod.
const partialObjectMetadata = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"

// serverResourceVersion is the resourceVersion of the ConfigMap called name on the API server, "" when it
// does not exist.
func (c *Client) serverResourceVersion(ctx context.Context, name string) (string, error) {
	rc := c.cs.CoreV1().RESTClient()
	if rc == nil || (reflect.ValueOf(rc).Kind() == reflect.Pointer && reflect.ValueOf(rc).IsNil()) {
		// Fake clientsets have no REST client; read the whole object instead.
		cm, err := c.cs.CoreV1().ConfigMaps(c.cfg.Namespace).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return "", nil
		}
		if err != nil {
			return "", err
		}
		return cm.ResourceVersion, nil
	}
	body, err := rc.Get().Namespace(c.cfg.Namespace).Resource("configmaps").Name(name).
		SetHeader("Accept", partialObjectMetadata).Do(ctx).Raw()
	if apierrors.IsNotFound(err) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	var meta metav1.PartialObjectMetadata
	if err := json.Unmarshal(body, &meta); err != nil {
		return "", fmt.Errorf("decoding metadata: %w", err)
	}
	return meta.ResourceVersion, nil
}
