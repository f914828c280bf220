package plan

import (
	"slices"
	"strings"

	"github.com/consumergroup-operator/consumergroup-operator/api/v1alpha1"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/allocate"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/protocol"
)

// DiscoveredTopics are the names of the topics whose routes group reads from its name servers: the
// topics of its spec that list no brokers and, unless spec.nameServer.retryTopic is Ignore or the group
// broadcasts, its retry topic. None without spec.nameServer.
func DiscoveredTopics(group *v1alpha1.ConsumerGroup) []string {
	ns := group.Spec.NameServer
	if ns == nil {
		return nil
	}
	var out []string
	listed := map[string]bool{}
	for _, t := range group.Spec.Topics {
		listed[t.Name] = true
		if len(t.Brokers) == 0 {
			out = append(out, t.Name)
		}
	}
	if retry := group.RetryTopic(); retry != "" && !listed[retry] {
		out = append(out, retry)
	}
	return out
}

// BrokerZone is a discovered broker's zone: from the first of zones that lists it, else <room> of a name
// <room>@<broker>, else none.
func BrokerZone(broker string, zones ...[]v1alpha1.BrokerZone) string {
	for _, list := range zones {
		for _, z := range list {
			if z.Broker == broker {
				return z.Zone
			}
		}
	}
	if room, _, ok := strings.Cut(broker, "@"); ok && len(room) <= 63 {
		return room
	}
	return ""
}

// Topology is what a pass plans with: the group's topics with their brokers and queues, those the spec
// writes out and the discovered ones (spec.nameServer) with the routes in force (status.routes). A pass
// builds it once (topologyOf) and plans, observes and counts with it; the spec stays as written.
type Topology []v1alpha1.Topic

// TopologyOf is group's topology with routes: the spec's topics that list brokers, then each discovered
// topic with the brokers and readable queues of its route (none before its first read).
func TopologyOf(group *v1alpha1.ConsumerGroup, routes *v1alpha1.RoutesStatus) Topology {
	names := DiscoveredTopics(group)
	if len(names) == 0 {
		return Topology(group.Spec.Topics)
	}
	byName := map[string]*v1alpha1.TopicRoute{}
	if routes != nil {
		for i := range routes.Topics {
			byName[routes.Topics[i].Name] = &routes.Topics[i]
		}
	}
	out := Topology(slices.DeleteFunc(slices.Clone(group.Spec.Topics), func(t v1alpha1.Topic) bool { return len(t.Brokers) == 0 }))
	for _, name := range names {
		t := v1alpha1.Topic{Name: name}
		if r := byName[name]; r != nil {
			for _, b := range r.Brokers {
				zone := b.Zone
				if zone == "" {
					// Routes recorded before brokers had their zone in the status.
					zone = BrokerZone(b.Name, group.Spec.NameServer.BrokerZones)
				}
				t.Brokers = append(t.Brokers, v1alpha1.Broker{Name: b.Name, Queues: b.Queues, Zone: zone})
			}
		}
		out = append(out, t)
	}
	return out
}

// Scope is the set of the topology's queues, through which the operator reads what others write
// (protocol.Scope).
func (t Topology) Scope() *protocol.Scope {
	s := protocol.NewScope()
	for _, topic := range t {
		for _, b := range topic.Brokers {
			s.Add(topic.Name, b.Name, b.Queues)
		}
	}
	return s
}

// QueueCount is how many queues the topology lists.
func (t Topology) QueueCount() int {
	n := 0
	for _, topic := range t {
		for _, b := range topic.Brokers {
			n += int(b.Queues)
		}
	}
	return n
}

// Queues are the topology's queues in RocketMQ's order: by topic, then broker (allocate.CompareUTF16 of
// the names), then queue id.
func (t Topology) Queues() []allocate.Queue {
	out := make([]allocate.Queue, 0, t.QueueCount())
	for _, topic := range t.inRocketMQOrder() {
		brokers := slices.Clone(topic.Brokers)
		slices.SortFunc(brokers, func(a, b v1alpha1.Broker) int { return allocate.CompareUTF16(a.Name, b.Name) })
		for _, b := range brokers {
			for id := range b.Queues {
				out = append(out, allocate.Queue{Topic: topic.Name, Broker: b.Name, ID: id})
			}
		}
	}
	return out
}

// BrokerZones are the zones of the topology's brokers that have one, by broker name. A broker that two
// topics give different zones has the zone of the last topic in RocketMQ's order (allocate.CompareUTF16
// of the names), the order the plan lists the queues in.
func (t Topology) BrokerZones() map[string]string {
	zones := map[string]string{}
	for _, topic := range t.inRocketMQOrder() {
		for _, b := range topic.Brokers {
			if b.Zone != "" {
				zones[b.Name] = b.Zone
			}
		}
	}
	return zones
}

// inRocketMQOrder is a copy of the topology's topics sorted by name in UTF-16 order, as RocketMQ orders
// them (allocate.CompareRocketMQ).
func (t Topology) inRocketMQOrder() []v1alpha1.Topic {
	topics := slices.Clone(t)
	slices.SortFunc(topics, func(a, b v1alpha1.Topic) int { return allocate.CompareUTF16(a.Name, b.Name) })
	return topics
}
