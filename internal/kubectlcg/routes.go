package kubectlcg

import (
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/util/duration"

	"github.com/consumergroup-operator/consumergroup-operator/api/v1alpha1"
)

// RouteDescription is one broker's part of a discovered topic's route, as the operator last read it.
type RouteDescription struct {
	Topic         string `json:"topic"`
	Broker        string `json:"broker,omitempty"`
	Queues        int32  `json:"queues"`
	ReadQueueNums int32  `json:"readQueueNums"`
	Perm          string `json:"perm,omitempty"`
	Read          string `json:"read,omitempty"`
	AbsentSince   string `json:"absentSince,omitempty"`
}

// describeRoutes lists the routes in g's status, one line per topic and broker (one per topic without
// brokers), with the ages of their reads at now.
func describeRoutes(g *v1alpha1.ConsumerGroup, now time.Time) (nameServer, readAgo string, out []RouteDescription) {
	r := g.Status.Routes
	if r == nil {
		return "", "", nil
	}
	ago := func(t interface{ IsZero() bool }, at time.Time) string {
		if t.IsZero() {
			return ""
		}
		return duration.HumanDuration(now.Sub(at)) + " ago"
	}
	if r.ReadTime != nil {
		readAgo = ago(r.ReadTime, r.ReadTime.Time)
	}
	for _, t := range r.Topics {
		line := RouteDescription{Topic: t.Name}
		if t.ReadTime != nil {
			line.Read = ago(t.ReadTime, t.ReadTime.Time)
		}
		if t.AbsentSince != nil {
			line.AbsentSince = ago(t.AbsentSince, t.AbsentSince.Time)
		}
		if len(t.Brokers) == 0 {
			out = append(out, line)
		}
		for _, b := range t.Brokers {
			l := line
			l.Broker, l.Queues, l.ReadQueueNums, l.Perm = b.Name, b.Queues, b.ReadQueueNums, perm(b.Perm)
			out = append(out, l)
		}
	}
	return r.NameServer, readAgo, out
}

// perm writes permission bits as RocketMQ's tools do: R, W and X (inherit), or - for each bit unset.
func perm(p int32) string {
	b := []byte("---")
	if p&4 != 0 {
		b[0] = 'R'
	}
	if p&2 != 0 {
		b[1] = 'W'
	}
	if p&1 != 0 {
		b[2] = 'X'
	}
	return string(b)
}

// routesTable prints the routes section of describe.
func (d Description) routesTable(tw *table) {
	if d.Routes == nil {
		return
	}
	read := d.RoutesRead
	if read == "" {
		read = "not yet"
	}
	tw.printf("\nROUTES from name server %s, as they stand since %s\n", dash(d.NameServer), read)
	tw.printf("TOPIC\tBROKER\tQUEUES\tREAD QUEUES\tPERM\tSINCE\tABSENT SINCE\n")
	for _, r := range d.Routes {
		tw.printf("%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Topic, dash(r.Broker), fmt.Sprint(r.Queues), fmt.Sprint(r.ReadQueueNums), dash(r.Perm), dash(r.Read), dash(r.AbsentSince))
	}
}
