package controllers

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/consumergroup-operator/consumergroup-operator/api/v1alpha1"
	"github.com/consumergroup-operator/consumergroup-operator/internal/plan"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/protocol"
)

// nodeViews keeps the node views (docs/protocol.md, node mode): one ConfigMap per node, in the operator's
// namespace, with a line for every group that has a pod on the node. A line asks the node agent to
// confirm a member of the group only when its view holds the line's must-see generation; the operator
// raises the lines of a group to its newest generation before it counts on a member's promise, and
// remembers since when each line asked for what (plan.LineHistory).
//
// Only the operator writes node views (an admission policy sees to it), and a line of a group only rises:
// the operator raises it to the generation in force, and writes it again, after a removal, at the
// generation in force then, which no earlier line asked for more than. So a line is known to ask for at
// least what a write of it returned, from when it returned, and at least what the cache shows of it, from
// when the cache was read: the cache can only be behind. Someone who deletes or edits a view makes it
// confirm nothing, which no knowledge of the operator relies on.
type nodeViews struct {
	cached    client.Client
	live      client.Reader
	namespace string
	clock     clock.PassiveClock

	// mu guards lines: what the operator knows of each group's line in each node view.
	mu    sync.Mutex
	lines map[types.NamespacedName]map[string]plan.LineHistory

	// pendingMu guards pending: by node, by group, what passes asked of the lines and no write has made
	// yet. queue holds the nodes whose views have writes pending; woken, the groups whose lines a write
	// changed, for their passes to run again.
	pendingMu sync.Mutex
	pending   map[string]map[types.NamespacedName]lineChange
	queue     workqueue.TypedRateLimitingInterface[string]
	woken     chan event.GenericEvent

	// parsed holds the lines of each cached view, by name, as of its resourceVersion: a pass reads the
	// view of every node its group runs on, each with a line for every group there, and decoding them
	// all anew at every pass was a third of the operator's CPU at 20,000 pods (100 a node).
	parsedMu sync.Mutex
	parsed   map[string]parsedView

	// viewsOf holds, by group, the names of the cached views that hold a line of it, sorted: a pass finds
	// its group's lines without reading every view. The views' watch events keep it (viewChanged), which
	// decode each version of a view once. A field index of the cache did this with two sets a group (one
	// under its namespace, one under all namespaces) and decoded each view twice more at every write:
	// 2.4 MB for 200 views of 100 lines each, where viewsOf holds 0.9 MB.
	viewsMu sync.Mutex
	viewsOf map[types.NamespacedName][]string
}

// parsedView is a view's lines, or why it does not read, as of resourceVersion.
type parsedView struct {
	resourceVersion string
	lines           protocol.NodeViewLines
	err             error
}

// maxParsedViews bounds nodeViews.parsed, which keeps the views of nodes gone until it is full: twice the
// nodes of the largest cluster Kubernetes supports. Full, it starts again empty.
const maxParsedViews = 10000

func newNodeViews(cached client.Client, live client.Reader, namespace string, clk clock.PassiveClock) *nodeViews {
	return &nodeViews{cached: cached, live: live, namespace: namespace, clock: clk,
		lines:   map[types.NamespacedName]map[string]plan.LineHistory{},
		pending: map[string]map[types.NamespacedName]lineChange{},
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "nodeviews"}),
		woken:   make(chan event.GenericEvent, 1024),
		viewsOf: map[types.NamespacedName][]string{},
	}
}

// seen is what the operator knows of the group's lines: the histories it keeps, with what the cache shows
// now of the lines of the group's UID where that asks for more than they knew. A line of another group
// of the name (deleted and created again) is known nothing of: it is written again before any promise
// counts. It returns the lines the cache shows too, by node, for the pass's sync.
func (nv *nodeViews) seen(ctx context.Context, group types.NamespacedName, uid types.UID) (plan.NodeViews, map[string]protocol.NodeViewLine, error) {
	nodes, err := nv.nodesWithLines(ctx, group)
	if err != nil {
		return plan.NodeViews{}, nil, err
	}
	now := nv.clock.Now()
	nv.mu.Lock()
	defer nv.mu.Unlock()
	if nv.lines[group] == nil {
		nv.lines[group] = map[string]plan.LineHistory{}
	}
	known := nv.lines[group]
	for node, line := range nodes {
		last, knows := known[node].Last()
		switch {
		case line.GroupUID != uid:
			if !knows {
				known[node] = nil
			}
		case !knows || last < line.MustSee:
			known[node] = known[node].Add(now, line.MustSee)
		}
	}
	return plan.NodeViews{Enabled: true, Lines: maps.Clone(known)}, nodes, nil
}

// nodesWithLines are the nodes whose views, in the cache, hold a line for the group, with that line.
func (nv *nodeViews) nodesWithLines(ctx context.Context, group types.NamespacedName) (map[string]protocol.NodeViewLine, error) {
	nv.viewsMu.Lock()
	names := slices.Clone(nv.viewsOf[group])
	nv.viewsMu.Unlock()
	out := make(map[string]protocol.NodeViewLine, len(names))
	for _, name := range names {
		var cm corev1.ConfigMap
		// Read only: a view runs to a line per group on its node, and a pass reads many.
		if err := nv.cached.Get(ctx, client.ObjectKey{Namespace: nv.namespace, Name: name}, &cm, client.UnsafeDisableDeepCopy); err != nil {
			if apierrors.IsNotFound(err) {
				continue // deleted since its event was handled
			}
			return nil, fmt.Errorf("reading node view %s: %w", name, err)
		}
		if l, ok := nv.nodeViewLinesOf(&cm).Line(group.Namespace, group.Name); ok {
			out[cm.Annotations[protocol.NodeViewNodeAnnotation]] = l
		}
	}
	return out, nil
}

// linesOf is protocol.ReadNodeView of the cached view cm, decoded once for each resourceVersion.
func (nv *nodeViews) linesOf(cm *corev1.ConfigMap) (protocol.NodeViewLines, error) {
	nv.parsedMu.Lock()
	p, ok := nv.parsed[cm.Name]
	nv.parsedMu.Unlock()
	if ok && p.resourceVersion == cm.ResourceVersion && cm.ResourceVersion != "" {
		return p.lines, p.err
	}
	lines, err := protocol.ReadNodeView(cm)
	nv.parsedMu.Lock()
	defer nv.parsedMu.Unlock()
	if nv.parsed == nil || len(nv.parsed) >= maxParsedViews {
		nv.parsed = map[string]parsedView{}
	}
	nv.parsed[cm.Name] = parsedView{resourceVersion: cm.ResourceVersion, lines: lines, err: err}
	return lines, err
}

// nodeViewWork is what one pass must do to a group's lines: the nodes whose line to write at least at
// mustSee (or to learn, when this operator knows nothing of it), and those whose line to remove.
type nodeViewWork struct {
	raise, remove []string
}

// planNodeViews decides what a pass does to a group's lines. Every node that runs a pod of the group gets
// a line, so that the group's members there can be confirmed; a line on a node without one goes, which
// confirms nothing there, and is as good as any generation. A line is raised when it, or what this
// operator knows of it, asks for less than need says for its node (plan.NodeLinesMustSee).
func planNodeViews(podNodes map[string]bool, cachedLines map[string]protocol.NodeViewLine, known map[string]plan.LineHistory, groupUID types.UID, need plan.LinesMustSee) nodeViewWork {
	var w nodeViewWork
	for _, node := range slices.Sorted(maps.Keys(podNodes)) {
		line, inCache := cachedLines[node]
		last, knows := known[node].Last()
		n := need.On(node)
		switch {
		case !inCache, line.GroupUID != groupUID:
			w.raise = append(w.raise, node)
		case n > 0 && (line.MustSee < n || !knows || last < n):
			w.raise = append(w.raise, node)
		}
	}
	others := map[string]bool{}
	for node := range cachedLines {
		others[node] = true
	}
	for node, h := range known {
		if last, _ := h.Last(); last != plan.NoLine {
			others[node] = true
		}
	}
	for _, node := range slices.Sorted(maps.Keys(others)) {
		if !podNodes[node] {
			w.remove = append(w.remove, node)
		}
	}
	return w
}

// sync asks for the group's lines to be what planNodeViews says, from cachedLines, the lines the pass saw
// (seen): every node view the group's pods run on holding a line at least at need, raised to generation
// when written. The writes are the flusher's (Start): one per node for every group that asked
// meanwhile. It reports whether it asked for anything: once the writes return, the group's pass runs
// again (woken) and counts on what they wrote.
func (nv *nodeViews) sync(group *metav1.ObjectMeta, pods []corev1.Pod, cachedLines map[string]protocol.NodeViewLine, generation int64, need plan.LinesMustSee) bool {
	key := types.NamespacedName{Namespace: group.Namespace, Name: group.Name}
	podNodes := map[string]bool{}
	for i := range pods {
		if node := pods[i].Spec.NodeName; node != "" {
			podNodes[node] = true
		}
	}
	nv.mu.Lock()
	known := maps.Clone(nv.lines[key])
	nv.mu.Unlock()
	work := planNodeViews(podNodes, cachedLines, known, group.UID, need)
	for _, node := range work.raise {
		nv.ask(node, key, lineChange{uid: group.UID, mustSee: max(generation, need.On(node), 1)})
	}
	for _, node := range work.remove {
		nv.ask(node, key, lineChange{remove: true})
	}
	return len(work.raise)+len(work.remove) > 0
}

// lineChange is what a group's pass asks of its line in one node view: at least mustSee, for the group's
// incarnation uid; or no line.
type lineChange struct {
	uid     types.UID
	mustSee int64
	remove  bool
}

// merge is what asking for c after d asks: the later incarnation, the higher generation, or the removal
// asked last.
func (d lineChange) merge(c lineChange) lineChange {
	if c.remove || d.remove || c.uid != d.uid {
		return c
	}
	c.mustSee = max(c.mustSee, d.mustSee)
	return c
}

// apply makes lines hold what c asks of the group's line.
func (c lineChange) apply(lines protocol.NodeViewLines, group types.NamespacedName) protocol.NodeViewLines {
	if c.remove {
		return lines.Without(group.Namespace, group.Name)
	}
	if old, ok := lines.Line(group.Namespace, group.Name); ok && old.GroupUID == c.uid && old.MustSee >= c.mustSee {
		return lines
	}
	return lines.With(protocol.NodeViewLine{Namespace: group.Namespace, Group: group.Name, GroupUID: c.uid, MustSee: c.mustSee})
}

// ask records c for the group's line on node, for the flusher to write.
func (nv *nodeViews) ask(node string, group types.NamespacedName, c lineChange) {
	nv.pendingMu.Lock()
	if nv.pending[node] == nil {
		nv.pending[node] = map[types.NamespacedName]lineChange{}
	}
	if d, ok := nv.pending[node][group]; ok {
		c = d.merge(c)
	}
	nv.pending[node][group] = c
	nv.pendingMu.Unlock()
	nv.queue.Add(node)
}

// take empties what is asked of node's view.
func (nv *nodeViews) take(node string) map[types.NamespacedName]lineChange {
	nv.pendingMu.Lock()
	defer nv.pendingMu.Unlock()
	asked := nv.pending[node]
	delete(nv.pending, node)
	return asked
}

// giveBack returns what a failed write took, under what was asked since.
func (nv *nodeViews) giveBack(node string, asked map[types.NamespacedName]lineChange) {
	nv.pendingMu.Lock()
	defer nv.pendingMu.Unlock()
	if nv.pending[node] == nil {
		nv.pending[node] = map[types.NamespacedName]lineChange{}
	}
	for group, c := range asked {
		if later, ok := nv.pending[node][group]; ok {
			c = c.merge(later)
		}
		nv.pending[node][group] = c
	}
}

// flusherWorkers write node views at once, each one node at a time.
const flusherWorkers = 2

// NeedLeaderElection: only the leader writes node views.
func (nv *nodeViews) NeedLeaderElection() bool { return true }

// Start writes node views as passes ask, until ctx ends: one write per node for all the groups that
// asked since its last, which the work queue never runs twice at once.
func (nv *nodeViews) Start(ctx context.Context) error {
	go func() {
		<-ctx.Done()
		nv.queue.ShutDown()
	}()
	var wg sync.WaitGroup
	for range flusherWorkers {
		wg.Go(func() {
			for {
				node, shutdown := nv.queue.Get()
				if shutdown {
					return
				}
				if err := nv.flush(ctx, node); err != nil {
					log.FromContext(ctx).Error(err, "Cannot write a node view; trying again", "node", node)
					nv.queue.AddRateLimited(node)
				} else {
					nv.queue.Forget(node)
				}
				nv.queue.Done(node)
			}
		})
	}
	wg.Wait()
	return nil
}

// flush writes what was asked of node's view, and wakes the groups that asked.
func (nv *nodeViews) flush(ctx context.Context, node string) error {
	asked := nv.take(node)
	if len(asked) == 0 {
		return nil
	}
	groups := slices.SortedFunc(maps.Keys(asked), func(a, b types.NamespacedName) int { return strings.Compare(a.String(), b.String()) })
	err := nv.write(ctx, node, groups, func(lines protocol.NodeViewLines) protocol.NodeViewLines {
		for _, g := range groups {
			lines = asked[g].apply(lines, g)
		}
		return lines
	})
	if err != nil {
		nv.giveBack(node, asked)
		return err
	}
	for _, g := range groups {
		select {
		case nv.woken <- event.GenericEvent{Object: &v1alpha1.ConsumerGroup{ObjectMeta: metav1.ObjectMeta{Namespace: g.Namespace, Name: g.Name}}}:
		case <-ctx.Done():
			return nil
		}
	}
	return nil
}

// maxNodeViewTries bounds how often one write of a node view meets a newer version before the flusher
// tries again later.
const maxNodeViewTries = 5

// write changes node's view by change, from the cache, or from a read of the API server once a write met
// a newer version, and records what each of groups' lines holds from then on: from when the write
// returned, or, when nothing changed, from when it was read. A view that cannot be read (edited) is
// written again whole from change's lines alone.
func (nv *nodeViews) write(ctx context.Context, node string, groups []types.NamespacedName, change func(protocol.NodeViewLines) protocol.NodeViewLines) error {
	name := protocol.NodeViewName(node)
	for try := range maxNodeViewTries {
		readAt := nv.clock.Now()
		var cm corev1.ConfigMap
		reader := client.Reader(nv.cached)
		if try > 0 {
			reader = nv.live
		}
		err := reader.Get(ctx, client.ObjectKey{Namespace: nv.namespace, Name: name}, &cm)
		exists := err == nil
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("reading node view %s: %w", name, err)
		}
		var before protocol.NodeViewLines
		readErr := errNoNodeView
		if exists {
			// An edited view confirms nothing: it is written again, from nothing. The other groups'
			// passes, woken by the edit (nodeViewLinesLost), write their lines again.
			before, readErr = protocol.ReadNodeView(&cm)
		}
		after := change(before)
		if readErr == nil && slices.Equal(before.Lines, after.Lines) {
			nv.record(groups, node, readAt, after)
			return nil
		}
		err = nv.put(ctx, &cm, exists, node, after)
		switch {
		case err == nil:
			nv.record(groups, node, nv.clock.Now(), after)
			return nil
		case apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err):
			continue
		default:
			return fmt.Errorf("writing node view %s: %w", name, err)
		}
	}
	return fmt.Errorf("writing node view %s: %d writes in a row met a newer version", name, maxNodeViewTries)
}

// errNoNodeView stands for a node view that does not exist, which holds no line.
var errNoNodeView = errors.New("no node view")

// put writes lines as node's view: an update of cm when it exists, else a create.
func (nv *nodeViews) put(ctx context.Context, cm *corev1.ConfigMap, exists bool, node string, lines protocol.NodeViewLines) error {
	name := protocol.NodeViewName(node)
	data, digest := protocol.NodeViewData(name, lines)
	cm.Name, cm.Namespace = name, nv.namespace
	if cm.Labels == nil {
		cm.Labels = map[string]string{}
	}
	cm.Labels[protocol.NodeViewLabel] = "true"
	cm.Labels[protocol.ManagedByLabel] = protocol.ManagedByValue
	if cm.Annotations == nil {
		cm.Annotations = map[string]string{}
	}
	cm.Annotations[protocol.NodeViewNodeAnnotation] = node
	cm.Annotations[protocol.DigestAnnotation] = digest
	cm.Data = data
	if exists {
		return nv.cached.Update(ctx, cm)
	}
	return nv.cached.Create(ctx, cm)
}

// record notes that node's view held lines from at on, for each of groups.
func (nv *nodeViews) record(groups []types.NamespacedName, node string, at time.Time, lines protocol.NodeViewLines) {
	nv.mu.Lock()
	defer nv.mu.Unlock()
	for _, group := range groups {
		mustSee := plan.NoLine
		if l, ok := lines.Line(group.Namespace, group.Name); ok {
			mustSee = l.MustSee
		}
		if nv.lines[group] == nil {
			nv.lines[group] = map[string]plan.LineHistory{}
		}
		nv.lines[group][node] = nv.lines[group][node].Add(at, mustSee)
	}
}

// forget drops what the operator keeps of a group that is gone.
func (nv *nodeViews) forget(group types.NamespacedName) {
	nv.mu.Lock()
	defer nv.mu.Unlock()
	delete(nv.lines, group)
}

// removeGroup asks for the lines of a group that is gone, or is being deleted, to leave every node view
// the cache shows them in.
func (nv *nodeViews) removeGroup(ctx context.Context, group types.NamespacedName) error {
	nodes, err := nv.nodesWithLines(ctx, group)
	if err != nil {
		return err
	}
	for node := range nodes {
		nv.ask(node, group, lineChange{remove: true})
	}
	nv.forget(group)
	return nil
}

// viewChanged handles a watch event of a node view: old is the view before it (nil for a view created or
// first listed), new the view after it (nil for one deleted). It keeps viewsOf, and wakes the groups whose
// lines the change lowered or removed: a view deleted or edited by someone else. Their members on the
// node are not confirmed until their passes write the lines again. A change that only raises or adds
// lines, the operator's own, wakes nobody. Each view is decoded once (linesOf).
func (nv *nodeViews) viewChanged(old, new client.Object, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
	before, after := nv.nodeViewLinesOf(old), nv.nodeViewLinesOf(new)
	name := cmp.Or(nameOf(new), nameOf(old))
	nv.viewsMu.Lock()
	defer nv.viewsMu.Unlock()
	for _, l := range before.Lines {
		group := types.NamespacedName{Namespace: l.Namespace, Name: l.Group}
		now, still := after.Line(l.Namespace, l.Group)
		if !still || now.MustSee < l.MustSee || now.GroupUID != l.GroupUID {
			q.Add(reconcile.Request{NamespacedName: group})
		}
		if !still {
			if names, i, found := nv.viewsOfGroup(group, name); found {
				if names = slices.Delete(names, i, i+1); len(names) == 0 {
					delete(nv.viewsOf, group)
				} else {
					nv.viewsOf[group] = names
				}
			}
		}
	}
	for _, l := range after.Lines {
		group := types.NamespacedName{Namespace: l.Namespace, Name: l.Group}
		if names, i, found := nv.viewsOfGroup(group, name); !found {
			nv.viewsOf[group] = slices.Insert(names, i, name)
		}
	}
}

// viewsOfGroup is viewsOf[group], where view is or would be in it, and whether it is; under viewsMu.
func (nv *nodeViews) viewsOfGroup(group types.NamespacedName, view string) (names []string, i int, found bool) {
	names = nv.viewsOf[group]
	i, found = slices.BinarySearch(names, view)
	return names, i, found
}

// viewEvents passes the watch events of the node views to viewChanged.
func (nv *nodeViews) viewEvents() handler.TypedFuncs[client.Object, reconcile.Request] {
	return handler.TypedFuncs[client.Object, reconcile.Request]{
		CreateFunc: func(_ context.Context, e event.TypedCreateEvent[client.Object], q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			nv.viewChanged(nil, e.Object, q)
		},
		UpdateFunc: func(_ context.Context, e event.TypedUpdateEvent[client.Object], q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			nv.viewChanged(e.ObjectOld, e.ObjectNew, q)
		},
		DeleteFunc: func(_ context.Context, e event.TypedDeleteEvent[client.Object], q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			nv.viewChanged(e.Object, nil, q)
		},
	}
}

func nameOf(o client.Object) string {
	if o == nil {
		return ""
	}
	return o.GetName()
}

// isNodeView says whether o is a node view, by its label.
func isNodeView(o client.Object) bool {
	return o.GetLabels()[protocol.NodeViewLabel] == "true"
}

// nodeViewLinesOf are the lines of a node view (linesOf); none for anything else, or a view that cannot
// be read.
func (nv *nodeViews) nodeViewLinesOf(o client.Object) protocol.NodeViewLines {
	cm, ok := o.(*corev1.ConfigMap)
	if !ok || cm == nil || !isNodeView(cm) {
		return protocol.NodeViewLines{}
	}
	lines, err := nv.linesOf(cm)
	if err != nil {
		return protocol.NodeViewLines{}
	}
	return lines
}
