package controllers

import (
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/consumergroup-operator/consumergroup-operator/api/v1alpha1"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/nameserver"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/protocol"
)

// Discovered topics. A group with spec.nameServer has the routes of its topics that list no brokers (and
// of its retry topic) read from name servers, outside its passes. Where it reads them is a route source
// (routeSourceOf): a ClusterNameServer an administrator created and that selects the group's namespace,
// or, when the operator's administrator turned inline name servers on, the addresses in the group's
// spec. Reads are shared per source (routesources.go): every group that reads a topic from one source
// shares each read. A pass registers what its group wants and takes the last finished read, never
// waiting for one; it records the routes in status.routes before it plans with them. The status is where
// the routes last read survive a restart of the operator: while no name server answers, they stay in
// force.

// EventRoutesChanged reports a change of the discovered queues.
const EventRoutesChanged = "RoutesChanged"

// defaultRefreshInterval is the refresh interval of inline name servers that set none, RocketMQ clients'
// pollNameServerInterval, and the ClusterNameServer's default.
const defaultRefreshInterval = 30 * time.Second

// minRefreshInterval is the shortest refresh interval honoured, whatever an object says: the API refuses
// less, and an object from before that rule is read no more often.
const minRefreshInterval = 10 * time.Second

// absentIntervals is how many refresh intervals the name servers must keep answering that a topic does
// not exist before its queues are dropped.
const absentIntervals = 3

// routeReadBudget bounds one read of a source's routes, every name server and topic included.
const routeReadBudget = 30 * time.Second

// discoveredTopics are the names of the topics whose routes group reads from its name servers: the
// topics of its spec that list no brokers and, unless spec.nameServer.retryTopic is Ignore or the group
// broadcasts, its retry topic. None without spec.nameServer.
func discoveredTopics(group *v1alpha1.ConsumerGroup) []string {
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

// serviceAddr is the address of a Service's name servers.
func serviceAddr(name, namespace string, port int32) string {
	if port == 0 {
		port = 9876
	}
	return net.JoinHostPort(name+"."+namespace+".svc", strconv.Itoa(int(port)))
}

// inlineAddrs are the addresses of group's inline name servers, in the order they are tried.
func inlineAddrs(group *v1alpha1.ConsumerGroup) []string {
	ns := group.Spec.NameServer
	if ns.Service != nil {
		return []string{serviceAddr(ns.Service.Name, group.Namespace, ns.Service.Port)}
	}
	return ns.Addresses
}

// clusterAddrs are the addresses of a ClusterNameServer, in the order they are tried.
func clusterAddrs(cns *v1alpha1.ClusterNameServer) []string {
	if s := cns.Spec.Service; s != nil {
		return []string{serviceAddr(s.Name, s.Namespace, s.Port)}
	}
	return cns.Spec.Addresses
}

// refreshInterval is seconds as an interval: defaultRefreshInterval when unset, never below
// minRefreshInterval.
func refreshInterval(seconds *int32) time.Duration {
	if seconds == nil || *seconds <= 0 {
		return defaultRefreshInterval
	}
	return max(time.Duration(*seconds)*time.Second, minRefreshInterval)
}

// brokerZone is a discovered broker's zone: from the first of zones that lists it, else <room> of a name
// <room>@<broker>, else none.
func brokerZone(broker string, zones ...[]v1alpha1.BrokerZone) string {
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

// topology is what a pass plans with: the group's topics with their brokers and queues, those the spec
// writes out and the discovered ones (spec.nameServer) with the routes in force (status.routes). A pass
// builds it once (topologyOf) and plans, observes and counts with it; the spec stays as written.
type topology []v1alpha1.Topic

// topologyOf is group's topology with routes: the spec's topics that list brokers, then each discovered
// topic with the brokers and readable queues of its route (none before its first read).
func topologyOf(group *v1alpha1.ConsumerGroup, routes *v1alpha1.RoutesStatus) topology {
	names := discoveredTopics(group)
	if len(names) == 0 {
		return topology(group.Spec.Topics)
	}
	byName := map[string]*v1alpha1.TopicRoute{}
	if routes != nil {
		for i := range routes.Topics {
			byName[routes.Topics[i].Name] = &routes.Topics[i]
		}
	}
	out := topology(slices.DeleteFunc(slices.Clone(group.Spec.Topics), func(t v1alpha1.Topic) bool { return len(t.Brokers) == 0 }))
	for _, name := range names {
		t := v1alpha1.Topic{Name: name}
		if r := byName[name]; r != nil {
			for _, b := range r.Brokers {
				zone := b.Zone
				if zone == "" {
					// Routes recorded before brokers had their zone in the status.
					zone = brokerZone(b.Name, group.Spec.NameServer.BrokerZones)
				}
				t.Brokers = append(t.Brokers, v1alpha1.Broker{Name: b.Name, Queues: b.Queues, Zone: zone})
			}
		}
		out = append(out, t)
	}
	return out
}

// scope is the set of the topology's queues, through which the operator reads what others write
// (protocol.Scope).
func (t topology) scope() *protocol.Scope {
	s := protocol.NewScope()
	for _, topic := range t {
		for _, b := range topic.Brokers {
			s.Add(topic.Name, b.Name, b.Queues)
		}
	}
	return s
}

// brokerZones are the zones of the topology's brokers that have one, by broker name.
func (t topology) brokerZones() map[string]string {
	zones := map[string]string{}
	for _, topic := range t {
		for _, b := range topic.Brokers {
			if b.Zone != "" {
				zones[b.Name] = b.Zone
			}
		}
	}
	return zones
}

// Topology is the topics the operator plans group with: the spec's, and the discovered ones with the
// routes of its status (topologyOf).
func Topology(group *v1alpha1.ConsumerGroup) []v1alpha1.Topic {
	return topologyOf(group, group.Status.Routes)
}

// routeRead is what one read of a source's routes found.
type routeRead struct {
	// seq numbers the reads of every source, so that a group records each read once.
	seq        int64
	at         time.Time
	topics     []string
	answers    map[string]nameserver.Answer
	answeredBy string
	errs       []*nameserver.Error
	// refused is set when the group may not read its source at all (routeSourceOf): nothing was dialled.
	refused bool
}

// readProblem is a read that never happened, for a reason and a fixed sentence.
func readProblem(reason, sentence string) *routeRead {
	return &routeRead{refused: true, errs: []*nameserver.Error{{Reason: reason, Err: sentenceError(sentence)}}}
}

// sentenceError is an error whose text is a fixed sentence of the operator's own.
type sentenceError string

func (e sentenceError) Error() string { return string(e) }
