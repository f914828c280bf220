package kubectlcg

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/duration"

	"github.com/consumergroup-operator/consumergroup-operator/api/v1alpha1"
	"github.com/consumergroup-operator/consumergroup-operator/internal/plan"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/allocate"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/protocol"
)

// Description is what kubectl cg describe says of a group.
type Description struct {
	Namespace  string `json:"namespace"`
	Group      string `json:"group"`
	Strategy   string `json:"strategy"`
	Paused     bool   `json:"paused"`
	Generation int64  `json:"generation"`
	Unowned    int32  `json:"unownedQueues"`
	// CrossZone counts the published queues read outside their broker's zone (allocate.CrossZone), and
	// MinCrossZone the fewest any balanced plan of the current members allows (allocate.MinCrossZone);
	// both absent when no broker has a zone.
	CrossZone    *int `json:"crossZone,omitempty"`
	MinCrossZone *int `json:"minCrossZone,omitempty"`
	// NameServer, RoutesRead and Routes are the routes of the discovered topics (status.routes): the
	// name server that last answered, since when they stand as they are (a read that finds them unchanged
	// writes nothing), each topic's brokers.
	NameServer string             `json:"nameServer,omitempty"`
	RoutesRead string             `json:"routesRead,omitempty"`
	Routes     []RouteDescription `json:"routes,omitempty"`
	// Conditions are the group's status conditions.
	Conditions []metav1.Condition `json:"conditions"`
	// Members are the pods the published assignment names, and the members that have no entry yet.
	Members []MemberDescription `json:"members"`
	// Pending are the handoffs in flight; Fenced the pods fenced for missing their revoke timeout.
	Pending []PendingHandoff `json:"pending,omitempty"`
	Fenced  []string         `json:"fenced,omitempty"`
}

// MemberDescription is one member pod's line.
type MemberDescription struct {
	Pod    string `json:"pod"`
	ID     string `json:"id"`
	Zone   string `json:"zone,omitempty"`
	Weight int32  `json:"weight,omitempty"`
	// Queues are the queues its published entry lists, as ranges; Count how many.
	Queues string `json:"queues"`
	Count  int    `json:"count"`
	// AckedGeneration is the last generation its Lease acknowledges; LeaseAge the time since it renewed.
	AckedGeneration int64  `json:"ackedGeneration"`
	LeaseAge        string `json:"leaseAge,omitempty"`
	// Load is the total load the member reports for its queues (pkg/member's ReportLoad, the agent's
	// PUT /v1/load); absent when it reports none.
	Load *float64 `json:"load,omitempty"`
}

// PendingHandoff is queues a pod still reads until it acknowledges Generation.
type PendingHandoff struct {
	Pod        string `json:"pod"`
	Generation int64  `json:"generation"`
	Queues     string `json:"queues"`
}

func describeCommand(o *options) *cobra.Command {
	return o.previewCommand("describe GROUP",
		"Each member's pod, id, zone, weight, queues, acknowledged generation and Lease age; handoffs in flight; fenced members; conditions",
		cobra.ExactArgs(1),
		func(g *v1alpha1.ConsumerGroup, pv *plan.Preview, _ []string) (answer, error) {
			return describe(g, pv, o.now()), nil
		})
}

// describe assembles a Description from the group and its preview.
func describe(g *v1alpha1.ConsumerGroup, pv *plan.Preview, now time.Time) Description {
	d := Description{Namespace: g.Namespace, Group: g.Name, Strategy: string(g.Spec.Strategy.Type), Paused: g.Spec.Paused,
		Generation: pv.Generation, Unowned: g.Status.UnownedQueues, Conditions: g.Status.Conditions}
	members := map[string]plan.PreviewMember{}
	for _, m := range pv.Members {
		members[m.Pod] = m
	}
	pods := slices.Collect(maps.Keys(pv.Current))
	for _, m := range pv.Members {
		if _, ok := pv.Current[m.Pod]; !ok {
			pods = append(pods, m.Pod)
		}
	}
	slices.Sort(pods)
	for _, pod := range pods {
		line := MemberDescription{Pod: pod, Queues: ranges(pv.Current[pod]), Count: len(pv.Current[pod])}
		if m, ok := members[pod]; ok {
			line.ID, line.Zone, line.Weight = m.ID, m.Zone, m.Weight
		}
		for _, s := range g.Status.Members {
			if s.Pod == pod && line.ID == "" {
				line.ID = s.ID
			}
		}
		if l, ok := pv.Leases[pod]; ok {
			line.AckedGeneration = l.AckedGeneration
			line.LeaseAge = duration.HumanDuration(now.Sub(l.RenewTime))
			if len(l.Load) > 0 {
				var total float64
				for _, v := range l.Load {
					total += v
				}
				line.Load = &total
			}
		}
		d.Members = append(d.Members, line)
	}
	for _, r := range pv.Revocations {
		q := ranges(r.Queues)
		if r.All {
			q = "every queue it does not claim (recovery)"
		}
		d.Pending = append(d.Pending, PendingHandoff{Pod: r.Pod, Generation: r.Generation, Queues: q})
	}
	d.Fenced = pv.Fenced
	d.CrossZone, d.MinCrossZone = crossZones(pv)
	d.NameServer, d.RoutesRead, d.Routes = describeRoutes(g, now)
	return d
}

// crossZones counts the published queues read outside their broker's zone and the fewest a balanced plan
// allows; nil when no broker has a zone, where the count says nothing.
func crossZones(pv *plan.Preview) (current, least *int) {
	if !slices.ContainsFunc(slices.Collect(maps.Values(pv.BrokerZones)), func(z string) bool { return z != "" }) {
		return nil, nil
	}
	in := allocate.Input{Queues: pv.Queues, BrokerZones: pv.BrokerZones}
	reading := allocate.Plan{}
	byPod := map[string]string{}
	for _, m := range pv.Members {
		in.Members = append(in.Members, m.Member)
		byPod[m.Pod] = m.ID
	}
	for pod, qs := range pv.Current {
		id, ok := byPod[pod]
		if !ok {
			id = "pod " + pod // not a member: its queues count as read from no zone
		}
		reading[id] = qs
	}
	c, m := allocate.CrossZone(in, reading), allocate.MinCrossZone(in)
	return &c, &m
}

func (d Description) table(w io.Writer) error {
	tw := newTable(w)
	state := ""
	if d.Paused {
		state = " (paused)"
	}
	zones := ""
	if d.CrossZone != nil && d.MinCrossZone != nil {
		zones = fmt.Sprintf(", %d read outside their broker's zone (fewest balance allows: %d)", *d.CrossZone, *d.MinCrossZone)
	}
	tw.printf("ConsumerGroup %s/%s: strategy %s, generation %d%s, %d queues unowned%s\n\n", d.Namespace, d.Group, d.Strategy, d.Generation, state, d.Unowned, zones)
	tw.printf("POD\tID\tZONE\tWEIGHT\tCOUNT\tQUEUES\tACKED\tLEASE AGE\tLOAD\n")
	for _, m := range d.Members {
		tw.printf("%s\t%s\t%s\t%s\t%d\t%s\t%d\t%s\t%s\n", m.Pod, dash(m.ID), dash(m.Zone), dash(weight(m.Weight)), m.Count, m.Queues,
			m.AckedGeneration, dash(m.LeaseAge), dash(formatLoad(m.Load)))
	}
	if len(d.Pending) > 0 {
		tw.printf("\nHANDOFFS IN FLIGHT\tUNTIL IT ACKNOWLEDGES\tSTILL READS\n")
		for _, p := range d.Pending {
			tw.printf("%s\t%d\t%s\n", p.Pod, p.Generation, p.Queues)
		}
	}
	if len(d.Fenced) > 0 {
		tw.printf("\nFenced (missed the revoke timeout): %s\n", strings.Join(d.Fenced, ", "))
	}
	d.routesTable(tw)
	tw.printf("\nCONDITION\tSTATUS\tREASON\tMESSAGE\n")
	for _, c := range d.Conditions {
		tw.printf("%s\t%s\t%s\t%s\n", c.Type, c.Status, c.Reason, c.Message)
	}
	return tw.flush()
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func weight(w int32) string {
	if w == 0 {
		return ""
	}
	return fmt.Sprint(w)
}

// WhoHas is the answer to kubectl cg who-has.
type WhoHas struct {
	Queue string `json:"queue"`
	// Pod and Member are whose published entry lists the queue; empty when no entry does.
	Pod    string `json:"pod,omitempty"`
	Member string `json:"member,omitempty"`
	// ClaimedBy are the pods whose Lease claims the queue: they may be reading it. More than the entry's
	// pod while a handoff is in flight.
	ClaimedBy  []string `json:"claimedBy"`
	Generation int64    `json:"generation"`
}

func whoHasCommand(o *options) *cobra.Command {
	// A malformed queue fails before the API server is asked anything.
	validQueue := func(_ *cobra.Command, args []string) error {
		_, err := protocol.ParseQueue(args[1])
		return err
	}
	return o.previewCommand("who-has GROUP TOPIC/BROKER/ID",
		"Which pod the published assignment gives a queue to, and which pods' Leases claim it",
		cobra.MatchAll(cobra.ExactArgs(2), validQueue),
		func(g *v1alpha1.ConsumerGroup, pv *plan.Preview, args []string) (answer, error) {
			q, _ := protocol.ParseQueue(args[1])
			if !specQueue(g, q) {
				return nil, fmt.Errorf("%s is not a queue of consumergroup %s/%s", q, g.Namespace, g.Name)
			}
			return whoHas(g, pv, q), nil
		})
}

func whoHas(g *v1alpha1.ConsumerGroup, pv *plan.Preview, q allocate.Queue) WhoHas {
	w := WhoHas{Queue: q.String(), Generation: pv.Generation, ClaimedBy: []string{}}
	for _, pod := range slices.Sorted(maps.Keys(pv.Current)) {
		if slices.Contains(pv.Current[pod], q) {
			w.Pod = pod
			for _, m := range g.Status.Members {
				if m.Pod == pod {
					w.Member = m.ID
				}
			}
		}
	}
	for _, pod := range slices.Sorted(maps.Keys(pv.Leases)) {
		l := pv.Leases[pod]
		if l.ClaimErr != nil || slices.Contains(l.Claim, q) {
			w.ClaimedBy = append(w.ClaimedBy, pod)
		}
	}
	return w
}

func (w WhoHas) table(out io.Writer) error {
	var err error
	if w.Pod == "" {
		_, err = fmt.Fprintf(out, "%s: no member has it in generation %d", w.Queue, w.Generation)
	} else {
		_, err = fmt.Fprintf(out, "%s: %s (member %s), generation %d", w.Queue, w.Pod, dash(w.Member), w.Generation)
	}
	if err != nil {
		return err
	}
	if others := slices.DeleteFunc(slices.Clone(w.ClaimedBy), func(p string) bool { return p == w.Pod }); len(others) > 0 {
		_, err = fmt.Fprintf(out, "; still claimed by %s until the handoff completes", strings.Join(others, ", "))
	}
	if err == nil {
		_, err = fmt.Fprintln(out)
	}
	return err
}

// specQueue reports whether the group's spec lists q, or the routes of its discovered topics do.
func specQueue(g *v1alpha1.ConsumerGroup, q allocate.Queue) bool {
	for _, t := range plan.TopologyOf(g, g.Status.Routes) {
		if t.Name != q.Topic {
			continue
		}
		for _, b := range t.Brokers {
			if b.Name == q.Broker && q.ID < b.Queues {
				return true
			}
		}
	}
	return false
}

// formatLoad prints a reported load with four significant digits, as members report it; "" for none.
func formatLoad(load *float64) string {
	if load == nil {
		return ""
	}
	return strconv.FormatFloat(*load, 'g', 4, 64)
}
