package member_test

import (
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"

	"github.com/consumergroup-operator/consumergroup-operator/api/v1alpha1"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/member"
)

func TestConstantsMatchTheAPI(t *testing.T) {
	if member.GroupLabel != v1alpha1.GroupLabel {
		t.Errorf("member.GroupLabel = %q, v1alpha1.GroupLabel = %q", member.GroupLabel, v1alpha1.GroupLabel)
	}
	if member.GenerationAnnotation != v1alpha1.GenerationAnnotation {
		t.Errorf("member.GenerationAnnotation = %q, v1alpha1.GenerationAnnotation = %q", member.GenerationAnnotation, v1alpha1.GenerationAnnotation)
	}
}

func TestLeaseName(t *testing.T) {
	if got := member.LeaseName("orders", "consumer-0"); got != "orders.consumer-0" {
		t.Errorf("LeaseName(orders, consumer-0) = %q, want orders.consumer-0", got)
	}
	long := strings.Repeat("g", 200)
	// Cuts that would end in '.' or '-' must be trimmed to keep a valid name.
	pods := []string{
		strings.Repeat("p", 100) + "-a",
		strings.Repeat("p", 100) + "-b",
		strings.Repeat("p", 42) + "." + strings.Repeat("q", 60),
		strings.Repeat("p", 41) + "-." + strings.Repeat("q", 60),
		strings.Repeat("p", 52),
	}
	seen := map[string]string{}
	for _, pod := range pods {
		name := member.LeaseName(long, pod)
		if len(name) > 253 {
			t.Errorf("LeaseName(%d chars, %q) is %d characters long", len(long), pod, len(name))
		}
		if msgs := validation.IsDNS1123Subdomain(name); len(msgs) > 0 {
			t.Errorf("LeaseName(%d chars, %q) = %q is not a valid name: %v", len(long), pod, name, msgs)
		}
		if other, dup := seen[name]; dup {
			t.Errorf("pods %q and %q share Lease name %q", other, pod, name)
		}
		seen[name] = pod
		if member.LeaseName(long, pod) != name {
			t.Errorf("LeaseName is not deterministic for %q", pod)
		}
	}
}

func TestReadLease(t *testing.T) {
	renew := time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)
	lease := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{member.AckedGenerationAnnotation: "12"}},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity:       ptr.To("consumer-0"),
			LeaseDurationSeconds: ptr.To(int32(15)),
			RenewTime:            ptr.To(metav1.NewMicroTime(renew)),
		},
	}
	s := member.ReadLease(lease)
	if s.Member != "consumer-0" || s.AckedGeneration != 12 || !s.RenewTime.Equal(renew) || s.Duration != 15*time.Second {
		t.Fatalf("ReadLease = %+v", s)
	}
	if !s.Live(renew.Add(14 * time.Second)) {
		t.Error("a Lease renewed 14 s ago with a 15 s duration is not live")
	}
	if s.Live(renew.Add(15 * time.Second)) {
		t.Error("a Lease renewed 15 s ago with a 15 s duration is live")
	}
	lease.Annotations[member.AckedGenerationAnnotation] = "twelve"
	if got := member.ReadLease(lease).AckedGeneration; got != 0 {
		t.Errorf("an unreadable acked generation reads as %d, want 0", got)
	}
	if member.ReadLease(&coordinationv1.Lease{}).Live(renew) {
		t.Error("a Lease never renewed is live")
	}
}

func TestConfigFromEnv(t *testing.T) {
	t.Setenv(member.EnvPodName, "consumer-0")
	t.Setenv(member.EnvPodNamespace, "shop")
	t.Setenv(member.EnvPodUID, "6f1c")
	t.Setenv(member.EnvConsumerGroup, "orders")
	t.Setenv(member.EnvMemberID, "")
	cfg, err := member.ConfigFromEnv()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.MemberID != "" || cfg.Pod != "consumer-0" || cfg.Namespace != "shop" || cfg.Group != "orders" || cfg.PodUID != "6f1c" {
		t.Fatalf("ConfigFromEnv = %+v", cfg)
	}
	c, err := member.New(cs, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Config(); got.MemberID != "consumer-0" || got.LeaseDuration != member.DefaultLeaseDuration {
		t.Fatalf("defaults: member id %q, lease duration %v", got.MemberID, got.LeaseDuration)
	}

	t.Setenv(member.EnvPodUID, "")
	t.Setenv(member.EnvConsumerGroup, "")
	_, err = member.ConfigFromEnv()
	if err == nil || !strings.Contains(err.Error(), member.EnvPodUID) || !strings.Contains(err.Error(), member.EnvConsumerGroup) {
		t.Fatalf("ConfigFromEnv without POD_UID and CONSUMER_GROUP returned %v, want an error naming both", err)
	}
	if _, err := member.New(cs, member.Config{Namespace: "shop", Group: "orders", Pod: "p", PodUID: "u", LeaseDuration: 1500 * time.Millisecond}); err == nil {
		t.Fatal("New accepted a lease duration of 1.5 s")
	}
}
