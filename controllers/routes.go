package controllers

import (
	"net"
	"strconv"
	"time"

	"github.com/consumergroup-operator/consumergroup-operator/api/v1alpha1"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/nameserver"
)

// Discovered topics. A group with spec.nameServer has the routes of its topics that list no brokers (and
// of its retry topic) read from name servers, outside its passes. Where it reads them is a route source
// (routeSourceOf): a ClusterNameServer an administrator created and that selects the group's namespace,
// or, when the operator's administrator turned inline name servers on, the addresses in the group's
// spec. Reads are shared per source (routesources.go): every group that reads a topic from one source
// shares each read. The route discovery (routeDiscovery), a controller of its own, registers what each
// group wants and records the last finished read in status.routes, never waiting for one; the group's
// passes plan with what the status holds and read no name server. The status is where the routes last read
// survive a restart of the operator: while no name server answers, they stay in force.

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
