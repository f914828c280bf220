package kubectlcg

import (
	"context"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strconv"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/consumergroup-operator/consumergroup-operator/api/v1alpha1"
	"github.com/consumergroup-operator/consumergroup-operator/internal/observe"
	"github.com/consumergroup-operator/consumergroup-operator/internal/plan"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/allocate"
)

// Plan is what kubectl cg plan says: the moves from what the members read now to where the group would
// go, and the balance there.
type Plan struct {
	Namespace string `json:"namespace"`
	Group     string `json:"group"`
	// Change says what was assumed: "as it is", "--replicas 5", "--strategy Sticky", "-f changed.yaml".
	Change string `json:"change"`
	// Reason and Message are set when the operator would not plan: the change is refused as Ready would say.
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`
	Moves   []Move `json:"moves"`
	// Moved counts the queues that change reader; Queues the queues in all.
	Moved  int `json:"moved"`
	Queues int `json:"queues"`
	// BalanceMoves and LocalityMoves split the moves from a member that stays to another member
	// (allocate.CountMoves): the fewest any balanced plan needs, and those beyond, which Sticky balancing
	// by queue count makes only to read fewer queues across zones. Queues nobody reads now, or whose
	// reader leaves, are in neither. Set for that strategy only: another's moves beyond the bound are not
	// locality moves.
	BalanceMoves  *int `json:"balanceMoves,omitempty"`
	LocalityMoves *int `json:"localityMoves,omitempty"`
	// Members are the members after the change, with the queues each would read.
	Members []PlannedMember `json:"members"`
	// MinLoad and MaxLoad are the fewest and most queues a member would read; CrossZone the queues read
	// outside their broker's zone, when Zoned: some broker has a zone.
	MinLoad   int  `json:"minLoad"`
	MaxLoad   int  `json:"maxLoad"`
	Zoned     bool `json:"zoned"`
	CrossZone int  `json:"crossZone"`
	// MinCrossZone is the fewest queues any balanced plan reads outside their broker's zone
	// (allocate.MinCrossZone).
	MinCrossZone int `json:"minCrossZone"`
}

// Move is one queue that changes reader; From or To is empty for a queue nobody reads now, or then.
type Move struct {
	Queue string `json:"queue"`
	From  string `json:"from,omitempty"`
	To    string `json:"to,omitempty"`
}

// PlannedMember is one member's share after the change.
type PlannedMember struct {
	Pod    string `json:"pod"`
	ID     string `json:"id"`
	Zone   string `json:"zone,omitempty"`
	Count  int    `json:"count"`
	Queues string `json:"queues"`
}

func planCommand(o *options) *cobra.Command {
	var (
		file     string
		replicas int
		strategy string
	)
	cmd := &cobra.Command{
		Use:   "plan GROUP [-f changed.yaml | --replicas N | --strategy S]",
		Short: "What would move, and the balance after, if the group or its pods changed; computed by the operator's code on the live state, writing nothing",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			set := 0
			for _, on := range []bool{file != "", cmd.Flags().Changed("replicas"), strategy != ""} {
				if on {
					set++
				}
			}
			if set > 1 {
				return fmt.Errorf("give one of -f, --replicas and --strategy")
			}
			ctx := cmd.Context()
			c, g, err := o.group(ctx, args[0])
			if err != nil {
				return err
			}
			change := "as it is"
			reader := c
			switch {
			case file != "":
				change = "-f " + file
				if g, err = changedGroup(ctx, c, g, file); err != nil {
					return err
				}
			case strategy != "":
				change = "--strategy " + strategy
				g.Spec.Strategy = v1alpha1.Strategy{Type: v1alpha1.StrategyType(strategy)}
				if err := dryRun(ctx, c, g); err != nil {
					return err
				}
			case cmd.Flags().Changed("replicas"):
				change = "--replicas " + strconv.Itoa(replicas)
				if replicas < 0 {
					return fmt.Errorf("--replicas %d: want 0 or more", replicas)
				}
				pv, err := observe.PreviewGroup(ctx, c, g, o.now())
				if err != nil {
					return err
				}
				if pv.Target == nil {
					return fmt.Errorf("consumergroup %s/%s cannot be planned as it is: %s: %s", g.Namespace, g.Name, pv.Reason, pv.Message)
				}
				reader = scaled(c, pv, replicas)
			}
			// A what-if is planned as if the group were running: a paused group's preview is where it goes
			// once resumed.
			pv, err := observe.PreviewGroup(ctx, reader, g, o.now())
			if err != nil {
				return err
			}
			return o.print(planFor(g, pv, change))
		},
	}
	cmd.Flags().StringVarP(&file, "filename", "f", "", "a changed ConsumerGroup, as you would apply it")
	cmd.Flags().IntVar(&replicas, "replicas", 0, "the number of member pods, as if the workload were scaled")
	cmd.Flags().StringVar(&strategy, "strategy", "", "another strategy type, with its default parameters")
	return cmd
}

// changedGroup reads the changed group in file: the same group, which the API server accepts (checked with
// a dry-run update, so the error is the API server's own).
func changedGroup(ctx context.Context, c client.Client, live *v1alpha1.ConsumerGroup, file string) (*v1alpha1.ConsumerGroup, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	var changed v1alpha1.ConsumerGroup
	if err := yaml.UnmarshalStrict(data, &changed); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	if changed.Name != live.Name || changed.Namespace != "" && changed.Namespace != live.Namespace {
		return nil, fmt.Errorf("%s describes consumergroup %s/%s, not %s/%s", file, changed.Namespace, changed.Name, live.Namespace, live.Name)
	}
	g := live.DeepCopy()
	g.Spec = changed.Spec
	if err := dryRun(ctx, c, g); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	return g, nil
}

// dryRun asks the API server whether it would accept g, writing nothing. It fills in the defaults.
func dryRun(ctx context.Context, c client.Client, g *v1alpha1.ConsumerGroup) error {
	status := g.Status
	if err := c.Update(ctx, g, client.DryRunAll); err != nil {
		return fmt.Errorf("the API server would refuse the change: %w", err)
	}
	g.Status = status
	return nil
}

// scaled is c, except that the group's member pods are as many as replicas: the members past replicas
// in the strategy's order are left out, as a StatefulSet scales down from its last ordinal, and new pods
// like the last member are added, spread over the members' nodes in turn.
func scaled(c client.Client, pv *plan.Preview, replicas int) client.Client {
	return &scaledPods{Client: c, pv: pv, replicas: replicas}
}

type scaledPods struct {
	client.Client
	pv       *plan.Preview
	replicas int
}

func (s *scaledPods) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	if err := s.Client.List(ctx, list, opts...); err != nil {
		return err
	}
	pods, ok := list.(*corev1.PodList)
	if !ok {
		return nil
	}
	keep := map[string]bool{}
	var members []*corev1.Pod
	for i, m := range s.pv.Members {
		keep[m.Pod] = i < s.replicas
	}
	var items []corev1.Pod
	for _, p := range pods.Items {
		if k, member := keep[p.Name]; !member || k {
			items = append(items, p)
		}
	}
	for i := range items {
		if keep[items[i].Name] {
			members = append(members, &items[i])
		}
	}
	slices.SortFunc(members, func(a, b *corev1.Pod) int { return compareMembers(s.pv, a.Name, b.Name) })
	for n := len(s.pv.Members); n < s.replicas && len(members) > 0; n++ {
		model := members[len(members)-1]
		p := model.DeepCopy()
		base := model.GenerateName
		if base == "" {
			base = model.Name + "-"
		}
		p.Name = fmt.Sprintf("%splanned-%d", base, n)
		p.UID = types.UID(p.Name)
		p.Annotations = maps.Clone(model.Annotations)
		p.Spec.NodeName = members[n%len(members)].Spec.NodeName
		items = append(items, *p)
	}
	pods.Items = items
	return nil
}

// compareMembers orders two member pods as the preview lists them.
func compareMembers(pv *plan.Preview, a, b string) int {
	index := func(pod string) int {
		return slices.IndexFunc(pv.Members, func(m plan.PreviewMember) bool { return m.Pod == pod })
	}
	return index(a) - index(b)
}

// plan compares what the members read now with the preview's target.
func planFor(g *v1alpha1.ConsumerGroup, pv *plan.Preview, change string) Plan {
	p := Plan{Namespace: g.Namespace, Group: g.Name, Change: change, Reason: pv.Reason, Message: pv.Message, Moves: []Move{}}
	if pv.Target == nil {
		return p
	}
	from := map[allocate.Queue]string{}
	for pod, qs := range pv.Current {
		for _, q := range qs {
			from[q] = pod
		}
	}
	to := map[allocate.Queue]string{}
	for pod, qs := range pv.Target {
		for _, q := range qs {
			to[q] = pod
		}
	}
	queues := slices.Collect(maps.Keys(to))
	for q := range from {
		if _, ok := to[q]; !ok {
			queues = append(queues, q)
		}
	}
	slices.SortFunc(queues, allocate.CompareRocketMQ)
	for _, q := range queues {
		if from[q] != to[q] {
			p.Moves = append(p.Moves, Move{Queue: q.String(), From: from[q], To: to[q]})
		}
	}
	p.Moved, p.Queues = len(p.Moves), len(pv.Queues)
	target := allocate.Plan{}
	for i, m := range pv.Members {
		qs := pv.Target[m.Pod]
		target[m.ID] = qs
		p.Members = append(p.Members, PlannedMember{Pod: m.Pod, ID: m.ID, Zone: m.Zone, Count: len(qs), Queues: ranges(qs)})
		if i == 0 || len(qs) < p.MinLoad {
			p.MinLoad = len(qs)
		}
		p.MaxLoad = max(p.MaxLoad, len(qs))
	}
	members := make([]allocate.Member, len(pv.Members))
	current := allocate.Plan{}
	for i, m := range pv.Members {
		members[i] = m.Member
		if qs, ok := pv.Current[m.Pod]; ok {
			current[m.ID] = qs
		}
	}
	if stickyByCount(g) {
		moves := allocate.CountMoves(allocate.Input{Queues: pv.Queues, Members: members, Previous: current}, target)
		p.BalanceMoves, p.LocalityMoves = &moves.Balance, &moves.Locality
	}
	// A queue whose broker has no zone counts as outside it; without any zone, the count says nothing.
	for _, z := range pv.BrokerZones {
		if z != "" {
			in := allocate.Input{Queues: pv.Queues, Members: members, BrokerZones: pv.BrokerZones}
			p.CrossZone, p.MinCrossZone = allocate.CrossZone(in, target), allocate.MinCrossZone(in)
			p.Zoned = true
			break
		}
	}
	return p
}

// stickyByCount reports whether g's strategy is Sticky balancing by queue count, whose moves beyond the
// lower bound are all locality moves.
func stickyByCount(g *v1alpha1.ConsumerGroup) bool {
	s := g.Spec.Strategy
	return s.Type == v1alpha1.Sticky && (s.Sticky == nil || s.Sticky.BalanceBy != v1alpha1.BalanceByLoad)
}

func (p Plan) table(w io.Writer) error {
	tw := newTable(w)
	if p.Reason != "" {
		tw.printf("ConsumerGroup %s/%s (%s) would not be planned: %s: %s\n", p.Namespace, p.Group, p.Change, p.Reason, p.Message)
		return tw.flush()
	}
	zones := ""
	if p.Zoned {
		zones = fmt.Sprintf("; %d queues read outside their broker's zone (fewest balance allows: %d)", p.CrossZone, p.MinCrossZone)
	}
	beyond := ""
	if p.LocalityMoves != nil && *p.LocalityMoves > 0 {
		beyond = fmt.Sprintf(" (%d beyond the %d balance needs, for locality)", *p.LocalityMoves, *p.BalanceMoves)
	}
	tw.printf("ConsumerGroup %s/%s (%s): %d of %d queues move%s; %d members read %d to %d queues each%s\n\n",
		p.Namespace, p.Group, p.Change, p.Moved, p.Queues, beyond, len(p.Members), p.MinLoad, p.MaxLoad, zones)
	if len(p.Moves) > 0 {
		tw.printf("QUEUE\tFROM\tTO\n")
		for _, m := range p.Moves {
			tw.printf("%s\t%s\t%s\n", m.Queue, dash(m.From), dash(m.To))
		}
		tw.printf("\n")
	}
	tw.printf("POD\tID\tZONE\tCOUNT\tQUEUES\n")
	for _, m := range p.Members {
		tw.printf("%s\t%s\t%s\t%d\t%s\n", m.Pod, m.ID, dash(m.Zone), m.Count, m.Queues)
	}
	return tw.flush()
}

func pauseCommand(o *options, pause bool) *cobra.Command {
	use, short := "resume GROUP", "Let the operator publish again what the spec and the members ask"
	if pause {
		use, short = "pause GROUP", "Freeze the published assignment for an incident: members keep their queues, new members wait (spec.paused)"
	}
	return &cobra.Command{
		Use:   use,
		Short: short,
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, g, err := o.group(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			patch := client.MergeFrom(g.DeepCopy())
			g.Spec.Paused = pause
			if err := c.Patch(cmd.Context(), g, patch); err != nil {
				return err
			}
			verb := "resumed"
			if pause {
				verb = "paused"
			}
			_, err = fmt.Fprintf(o.streams.Out, "consumergroup %s/%s %s\n", g.Namespace, g.Name, verb)
			return err
		},
	}
}
