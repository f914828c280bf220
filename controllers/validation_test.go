//go:build envtest

package controllers

import (
	"context"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/consumergroup-operator/consumergroup-operator/api/v1alpha1"
	"github.com/consumergroup-operator/consumergroup-operator/internal/testenv"
)

// TestValidationRejectsBadSpecs checks each OpenAPI and CEL rule of the CRD against the real API server:
// the bad spec is refused, with a message that names the field.
func TestValidationRejectsBadSpecs(t *testing.T) {
	ns := newNamespace(t)
	valid := func() *testenv.GroupWrapper { return testenv.Group(ns, "v").Topic("t", testenv.Broker("b", 4, "")) }
	cases := []struct {
		name   string
		mutate func(*v1alpha1.ConsumerGroup)
		want   string
	}{
		{"empty selector", func(g *v1alpha1.ConsumerGroup) { g.Spec.Selector = metav1.LabelSelector{} }, "spec.selector"},
		{"duplicate topic", func(g *v1alpha1.ConsumerGroup) { g.Spec.Topics = append(g.Spec.Topics, g.Spec.Topics[0]) }, "spec.topics[1]: Duplicate value"},
		{"duplicate broker", func(g *v1alpha1.ConsumerGroup) {
			g.Spec.Topics[0].Brokers = append(g.Spec.Topics[0].Brokers, testenv.Broker("b", 2, ""))
		}, "spec.topics[0].brokers[1]: Duplicate value"},
		{"negative queues", func(g *v1alpha1.ConsumerGroup) { g.Spec.Topics[0].Brokers[0].Queues = -1 }, "spec.topics[0].brokers[0].queues"},
		{"too many queues", func(g *v1alpha1.ConsumerGroup) { g.Spec.Topics[0].Brokers[0].Queues = 70000 }, "spec.topics[0].brokers[0].queues"},
		{"topic without brokers", func(g *v1alpha1.ConsumerGroup) { g.Spec.Topics[0].Brokers = nil }, "spec.topics[].brokers: a topic without brokers is discovered from spec.nameServer, which is not set"},
		{"name server without address", func(g *v1alpha1.ConsumerGroup) {
			g.Spec.NameServer = &v1alpha1.NameServer{}
		}, "spec.nameServer: set exactly one of clusterNameServer, addresses or service"},
		{"name server with addresses and a service", func(g *v1alpha1.ConsumerGroup) {
			g.Spec.NameServer = &v1alpha1.NameServer{Addresses: []string{"10.0.0.1:9876"}, Service: &v1alpha1.NameServerService{Name: "n"}}
		}, "spec.nameServer: set exactly one of clusterNameServer, addresses or service"},
		{"cluster name server and addresses", func(g *v1alpha1.ConsumerGroup) {
			g.Spec.NameServer = &v1alpha1.NameServer{ClusterNameServer: "rocketmq", Addresses: []string{"10.0.0.1:9876"}}
		}, "spec.nameServer: set exactly one of clusterNameServer, addresses or service"},
		{"cluster name server with a group's credentials", func(g *v1alpha1.ConsumerGroup) {
			g.Spec.NameServer = &v1alpha1.NameServer{ClusterNameServer: "rocketmq", CredentialsSecret: "acl"}
		}, "spec.nameServer: credentialsSecret and refreshIntervalSeconds belong to the ClusterNameServer"},
		{"name server address without port", func(g *v1alpha1.ConsumerGroup) {
			g.Spec.NameServer = &v1alpha1.NameServer{Addresses: []string{"namesrv"}}
		}, "spec.nameServer.addresses[0]"},
		{"refresh interval 0", func(g *v1alpha1.ConsumerGroup) {
			g.Spec.NameServer = &v1alpha1.NameServer{Addresses: []string{"n:9876"}, RefreshIntervalSeconds: ptr.To[int32](0)}
		}, "spec.nameServer.refreshIntervalSeconds"},
		{"refresh interval under 10 s", func(g *v1alpha1.ConsumerGroup) {
			g.Spec.NameServer = &v1alpha1.NameServer{Addresses: []string{"n:9876"}, RefreshIntervalSeconds: ptr.To[int32](9)}
		}, "spec.nameServer.refreshIntervalSeconds: Invalid value: 9"},
		{"unknown retry topic mode", func(g *v1alpha1.ConsumerGroup) {
			g.Spec.NameServer = &v1alpha1.NameServer{Addresses: []string{"n:9876"}, RetryTopic: "Maybe"}
		}, "spec.nameServer.retryTopic"},
		{"unknown strategy", func(g *v1alpha1.ConsumerGroup) { g.Spec.Strategy.Type = "Random" }, "spec.strategy.type"},
		{"parameters of another type", func(g *v1alpha1.ConsumerGroup) {
			g.Spec.Strategy.ConsistentHash = &v1alpha1.ConsistentHashParameters{VirtualNodes: ptr.To[int32](5)}
		}, "spec.strategy.consistentHash may only be set when spec.strategy.type is ConsistentHash"},
		{"negative virtual nodes", func(g *v1alpha1.ConsumerGroup) {
			g.Spec.Strategy = v1alpha1.Strategy{Type: v1alpha1.ConsistentHash, ConsistentHash: &v1alpha1.ConsistentHashParameters{VirtualNodes: ptr.To[int32](-1)}}
		}, "spec.strategy.consistentHash.virtualNodes"},
		{"ByMachineRoom without rooms", func(g *v1alpha1.ConsumerGroup) {
			g.Spec.Strategy = v1alpha1.Strategy{Type: v1alpha1.ByMachineRoom}
		}, "spec.strategy.byMachineRoom is required"},
		{"ByConfig with Broadcasting", func(g *v1alpha1.ConsumerGroup) {
			g.Spec.MessageModel = v1alpha1.Broadcasting
			g.Spec.Strategy = v1alpha1.Strategy{Type: v1alpha1.ByConfig, ByConfig: &v1alpha1.ByConfigParameters{Assignments: []v1alpha1.MemberAssignment{}}}
		}, "ByConfig cannot be used with messageModel Broadcasting"},
		{"inner parameters of another inner type", func(g *v1alpha1.ConsumerGroup) {
			g.Spec.Strategy = v1alpha1.Strategy{Type: v1alpha1.MachineRoomNearby, MachineRoomNearby: &v1alpha1.MachineRoomNearbyParameters{
				Inner: "Averagely", ConsistentHash: &v1alpha1.ConsistentHashParameters{}}}
		}, "spec.strategy.machineRoomNearby.consistentHash may only be set"},
		{"unknown message model", func(g *v1alpha1.ConsumerGroup) { g.Spec.MessageModel = "Fanout" }, "spec.messageModel"},
		{"both identities", func(g *v1alpha1.ConsumerGroup) {
			g.Spec.MemberIdentity = v1alpha1.MemberIdentity{PodName: &v1alpha1.PodNameIdentity{}, Annotation: ptr.To("x")}
		}, "spec.memberIdentity: set at most one of podName or annotation"},
		{"balance by bytes", func(g *v1alpha1.ConsumerGroup) {
			g.Spec.Strategy = v1alpha1.Strategy{Type: v1alpha1.Sticky, Sticky: &v1alpha1.StickyParameters{BalanceBy: "Bytes"}}
		}, "spec.strategy.sticky.balanceBy"},
		{"negative load tolerance", func(g *v1alpha1.ConsumerGroup) {
			g.Spec.Strategy = v1alpha1.Strategy{Type: v1alpha1.Sticky, Sticky: &v1alpha1.StickyParameters{LoadTolerancePercent: ptr.To(int32(-5))}}
		}, "spec.strategy.sticky.loadTolerancePercent"},
		{"maxSkew with balanceBy Load", func(g *v1alpha1.ConsumerGroup) {
			g.Spec.Strategy = v1alpha1.Strategy{Type: v1alpha1.Sticky, Sticky: &v1alpha1.StickyParameters{BalanceBy: v1alpha1.BalanceByLoad, MaxSkew: ptr.To(int32(2))}}
		}, "spec.strategy.sticky.maxSkew applies to balanceBy Queues only"},
		{"no load rebalance interval", func(g *v1alpha1.ConsumerGroup) {
			g.Spec.Strategy = v1alpha1.Strategy{Type: v1alpha1.Sticky, Sticky: &v1alpha1.StickyParameters{LoadRebalanceIntervalSeconds: ptr.To(int32(0))}}
		}, "spec.strategy.sticky.loadRebalanceIntervalSeconds"},
		{"target load of zero", func(g *v1alpha1.ConsumerGroup) {
			g.Spec.Autoscaling = &v1alpha1.Autoscaling{TargetLoadPerMember: "0.0"}
		}, "spec.autoscaling.targetLoadPerMember must be above 0"},
		{"target load that is not a number", func(g *v1alpha1.ConsumerGroup) {
			g.Spec.Autoscaling = &v1alpha1.Autoscaling{TargetLoadPerMember: "1k"}
		}, "spec.autoscaling.targetLoadPerMember"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := valid().Obj()
			tc.mutate(g)
			err := k8s.Create(context.Background(), g)
			if err == nil {
				t.Fatalf("the API server accepted the spec; want an error naming %q", tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not contain %q", err, tc.want)
			}
		})
	}
	// The valid base spec is accepted, so each failure above comes from its own mutation.
	must(t, k8s.Create(context.Background(), valid().Obj()))
}
