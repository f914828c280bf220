package member

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/consumergroup-operator/consumergroup-operator/pkg/protocol"
)

// assignmentView watches the group's assignment ConfigMap through the API server (a mounted ConfigMap
// volume lags by a minute or more) and, while the assignment is sharded, the one shard that holds the
// pod's entry. It keeps the pod's protocol.EntryView, and checks on request that its watches keep up with
// the API server.
type assignmentView struct {
	cs                    kubernetes.Interface
	namespace, group, pod string
	podUID                types.UID
	indexName             string
	// changed is called, with no lock held, after the view changed.
	changed func()

	// mu guards the fields below it, and is released by defer (locked, update). No other lock of the
	// member's is taken while it is held; only an informer's, when followShardLocked starts one.
	mu sync.Mutex
	// synced is set once the index's informer has listed it.
	synced bool
	// index is the assignment ConfigMap as last seen; nil when it does not exist.
	index *corev1.ConfigMap
	shard shardWatch
	entry protocol.EntryView
	// suspects maps a watched ConfigMap whose resourceVersion differed from the API server's at the last
	// check to the resourceVersion this view had then.
	suspects map[string]string
	// heard counts, for each watched ConfigMap, the events its watches delivered, bookmarks included.
	heard map[string]*watchHeard
	// promised is set when the member promises contact fencing (Config.ContactTimeout), in node mode or
	// not: its confirmations, not the renewals' check, keep it from reading what was revoked.
	promised bool
	runCtx   context.Context
	// stopped are the done channels of the shard watches that may still run, closed once each has
	// stopped.
	stopped []<-chan struct{}
	// resolved is held's last reading of the entry (protocol.ViewEntry), kept while the view holds the
	// same objects: held runs at every confirmation, once a second, and decoding the entry was most of
	// its work. Informers replace the objects they hold, never change them.
	resolved resolvedEntry
}

// resolvedEntry is protocol.ViewEntry's answer for an index, a shard and whether the shard was read.
type resolvedEntry struct {
	index, shard *corev1.ConfigMap
	shardRead    bool
	entry        protocol.EntryView
	ok, valid    bool
}

// shardWatch is the shard ConfigMap that holds the pod's entry, and what its informer has seen.
type shardWatch struct {
	// name is the shard's name; "" when the assignment is not sharded.
	name string
	// cm is the shard as last seen; nil when it does not exist.
	cm *corev1.ConfigMap
	// read is set once the shard's informer has listed it.
	read bool
	stop context.CancelFunc
}

func newAssignmentView(cs kubernetes.Interface, cfg Config, changed func()) *assignmentView {
	return &assignmentView{
		cs: cs, namespace: cfg.Namespace, group: cfg.Group, pod: cfg.Pod, podUID: cfg.PodUID,
		indexName: protocol.AssignmentName(cfg.Group), changed: changed, suspects: map[string]string{},
		heard: map[string]*watchHeard{}, promised: cfg.contactFencing(),
	}
}

// run watches until ctx ends. synced is closed once the index has been read.
func (v *assignmentView) run(ctx context.Context, synced chan<- struct{}) {
	var heard *atomic.Uint64
	v.locked(func() {
		v.runCtx = ctx
		heard = v.listenLocked(v.indexName)
	})
	index := v.watch(ctx, v.indexName, heard, v.setIndex)
	if cache.WaitForCacheSync(ctx.Done(), index.hasSynced) {
		v.locked(func() {
			v.synced = true
			v.resolveLocked()
		})
		close(synced)
		v.changed()
	}
	<-ctx.Done()
	<-index.done
	var stopped []<-chan struct{}
	v.locked(func() { stopped = v.stopped })
	for _, done := range stopped {
		<-done
	}
}

// locked runs f with v.mu held.
func (v *assignmentView) locked(f func()) {
	v.mu.Lock()
	defer v.mu.Unlock()
	f()
}

// update runs f with v.mu held and, when f reports that the view changed, calls changed once v.mu is
// released.
func (v *assignmentView) update(f func() bool) {
	var changed bool
	v.locked(func() { changed = f() })
	if changed {
		v.changed()
	}
}

// current is whether the index has been read, and the pod's view.
func (v *assignmentView) current() (bool, protocol.EntryView) {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.synced, v.entry
}

// isClosed reports whether done is closed.
func isClosed(done <-chan struct{}) bool {
	select {
	case <-done:
		return true
	default:
		return false
	}
}

// configMapWatch is a running watch of one ConfigMap (assignmentView.watch).
type configMapWatch struct {
	// hasSynced reports whether the first list has been handled: the handler has had its state.
	hasSynced func() bool
	// done is closed once the watch has stopped.
	done <-chan struct{}
}

// watch starts an informer on the one ConfigMap called name, until ctx ends, calling set with each new
// state of it (nil once deleted), and counting in heard the events its watches deliver. The field
// selector on the name lets the pod's Role grant list and watch on it by resourceNames.
//
// The informer is client-go's plain one, whose one handler is called from its queue in turn, not a
// shared informer, which buffers each of its handlers' events in a listener of its own: a ring of 16 KB
// and two goroutines for every watch, where a member has one handler. hasSynced comes true only once
// the handler has returned for the first list, as the shared informer's own HasSynced did not promise.
func (v *assignmentView) watch(ctx context.Context, name string, heard *atomic.Uint64, set func(*corev1.ConfigMap)) configMapWatch {
	onObject := func(obj any) {
		if cm, ok := obj.(*corev1.ConfigMap); ok {
			set(cm)
		}
	}
	_, informer := cache.NewInformerWithOptions(cache.InformerOptions{
		ListerWatcher: assignmentListWatch(v.cs, v.namespace, name, heard),
		ObjectType:    &corev1.ConfigMap{},
		Handler: cache.ResourceEventHandlerFuncs{
			AddFunc:    onObject,
			UpdateFunc: func(_, obj any) { onObject(obj) },
			DeleteFunc: func(any) { set(nil) },
		},
	})
	done := make(chan struct{})
	go func() {
		defer close(done)
		informer.RunWithContext(ctx)
	}()
	return configMapWatch{hasSynced: informer.HasSynced, done: done}
}

// assignmentListWatch lists and watches the one ConfigMap called name in namespace, as the informer
// factory's own list-watch would (assignmentListOptions), and counts in heard every event a watch
// delivers, bookmarks included: what the renewals' check (checkCurrent) takes as proof that the watch is
// delivering.
func assignmentListWatch(cs kubernetes.Interface, namespace, name string, heard *atomic.Uint64) cache.ListerWatcher {
	return cache.ToListWatcherWithWatchListSemantics(&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			assignmentListOptions(&o, name, rand.Float64())
			return cs.CoreV1().ConfigMaps(namespace).List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			assignmentListOptions(&o, name, rand.Float64())
			w, err := cs.CoreV1().ConfigMaps(namespace).Watch(ctx, o)
			if err != nil {
				return nil, err
			}
			return watch.Filter(w, func(e watch.Event) (watch.Event, bool) {
				heard.Add(1)
				return e, true
			}), nil
		},
	}, cs)
}

// assignmentListOptions narrows the informer's list and watch requests to the ConfigMap called name, and
// makes its watches last watchTimeout to twice that (spread by r, from 0 to 1), where the informer's own
// last 5 to 10 minutes: every pod watches its assignment, and each watch that ends is started again, 45
// requests a second at 20,000 pods where these cost 7. A watch's length guards against nothing here: the
// renewals' check (checkCurrent) finds a watch that stopped delivering. The informer asks for a timeout
// on its watches only, so its lists are left as they are.
func assignmentListOptions(o *metav1.ListOptions, name string, r float64) {
	o.FieldSelector = fields.OneTermEqualSelector("metadata.name", name).String()
	if o.TimeoutSeconds != nil {
		o.TimeoutSeconds = ptr.To(int64(watchTimeout.Seconds() * (1 + r)))
	}
}

// watchTimeout is the shortest a watch of the assignment lasts before it is started again.
const watchTimeout = 30 * time.Minute

// setIndex takes a new state of the assignment ConfigMap, and follows it to the shard that holds the
// pod's entry when the assignment is sharded.
func (v *assignmentView) setIndex(cm *corev1.ConfigMap) {
	v.update(func() bool {
		v.index = cm
		v.followShardLocked()
		return v.resolveLocked()
	})
}

// setShard takes a new state of the shard ConfigMap called name.
func (v *assignmentView) setShard(name string, cm *corev1.ConfigMap) {
	v.update(func() bool {
		if v.shard.name != name {
			return false // an event from a shard no longer followed
		}
		v.shard.cm = cm
		return v.resolveLocked()
	})
}

// resolveLocked recomputes the pod's view from the ConfigMaps seen. It keeps the view so far while the
// shard lags behind the index.
func (v *assignmentView) resolveLocked() bool {
	if !v.synced {
		return false
	}
	entry, ok := protocol.ViewEntry(v.group, v.index, v.shard.cm, v.shard.read, v.pod, v.podUID)
	if !ok {
		return false
	}
	v.entry = entry
	return true
}

// followShardLocked starts watching the shard that holds the pod's entry, when the assignment is sharded
// and that shard is not already watched, and stops watching one no longer needed.
func (v *assignmentView) followShardLocked() {
	want, err := protocol.ShardFor(v.group, v.index, v.pod)
	if err != nil || want == v.shard.name {
		return
	}
	if v.shard.stop != nil {
		v.shard.stop()
	}
	delete(v.heard, v.shard.name)
	v.shard = shardWatch{name: want}
	if want == "" || v.runCtx == nil {
		return
	}
	ctx, cancel := context.WithCancel(v.runCtx)
	v.shard.stop = cancel
	shard := v.watch(ctx, want, v.listenLocked(want), func(cm *corev1.ConfigMap) { v.setShard(want, cm) })
	v.stopped = append(slices.DeleteFunc(v.stopped, isClosed), shard.done)
	go func() {
		if cache.WaitForCacheSync(ctx.Done(), shard.hasSynced) {
			v.update(func() bool {
				if v.shard.name != want {
					return false
				}
				v.shard.read = true
				return v.resolveLocked()
			})
		}
	}()
}

// checkCurrent fails when the watch of an assignment ConfigMap (the index, and the pod's shard when the
// assignment is sharded) has fallen behind the API server for a whole renewal period: a member that cannot
// see revocations must stop renewing, so that it stops consuming and the operator can count it as gone.
// One difference is normal (an update may be on its way); the same difference at the next check, with no
// event from the watch in between, is not.
//
// A member that promises contact fencing does not count on this check to stop reading what was revoked:
// its confirmations fence it within its contact timeout. For it the check only finds a watch that stopped
// delivering, which would leave what it is granted unread; a watch that delivered anything since the last
// check, if only one of the API server's bookmarks (one a minute or so to every watch that asks, as
// informers do), is delivering, and the check reads nothing. In node mode that spares a read for every
// renewal.
func (v *assignmentView) checkCurrent(ctx context.Context) error {
	if synced, _ := v.current(); !synced {
		return nil
	}
	for _, name := range v.watchedNames() {
		heard := v.heardSinceCheck(name) // called at every check: the next one counts from this one
		if heard && v.promised {
			v.locked(func() { delete(v.suspects, name) })
			continue
		}
		serverRV, err := v.serverResourceVersion(ctx, name)
		if err != nil {
			return fmt.Errorf("reading ConfigMap %s: %w", name, err)
		}
		if err := v.keepsUp(name, serverRV); err != nil {
			return err
		}
	}
	return nil
}

// watchHeard is how many events the watches of one ConfigMap delivered (their list-watch counts them),
// and how many the last check had seen (v.mu guards it).
type watchHeard struct {
	events  atomic.Uint64
	atCheck uint64
}

// listenLocked starts the count of the events that the watches of the ConfigMap called name deliver.
func (v *assignmentView) listenLocked(name string) *atomic.Uint64 {
	heard := &watchHeard{}
	v.heard[name] = heard
	return &heard.events
}

// heardSinceCheck reports whether a watch of the ConfigMap called name delivered an event, a bookmark
// included, since the last call.
func (v *assignmentView) heardSinceCheck(name string) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	heard, ok := v.heard[name]
	if !ok {
		return false
	}
	n, last := heard.events.Load(), heard.atCheck
	heard.atCheck = n
	return n != last
}

// keepsUp compares the resourceVersion of the ConfigMap called name in the view with the API server's,
// serverRV, and fails when they differ as they did at the last check.
func (v *assignmentView) keepsUp(name, serverRV string) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	ours := ""
	if name == v.indexName {
		ours = resourceVersionOf(v.index)
	} else if name == v.shard.name {
		ours = resourceVersionOf(v.shard.cm)
	}
	suspect, wasSuspect := v.suspects[name]
	switch {
	case serverRV == ours:
		delete(v.suspects, name)
	case wasSuspect && suspect == ours:
		return fmt.Errorf("the watch of ConfigMap %s is behind the API server (resourceVersion %q there, %q here) for a whole renewal period",
			name, serverRV, ours)
	default:
		v.suspects[name] = ours
	}
	return nil
}

// watchedNames are the ConfigMaps the view watches and has read: the index, and the pod's shard once read.
func (v *assignmentView) watchedNames() []string {
	v.mu.Lock()
	defer v.mu.Unlock()
	names := []string{v.indexName}
	if v.shard.name != "" && v.shard.read {
		names = append(names, v.shard.name)
	}
	return names
}

// confirm reports whether the view holds the newest version of every ConfigMap it watches, as the API
// server says in a read sent after the caller took the time: every assignment published before then has
// reached the view (contact fencing). A view not yet synced confirms nothing.
func (v *assignmentView) confirm(ctx context.Context) (bool, error) {
	if synced, _ := v.current(); !synced {
		return false, nil
	}
	for _, name := range v.watchedNames() {
		serverRV, err := v.serverResourceVersion(ctx, name)
		if err != nil {
			return false, fmt.Errorf("reading ConfigMap %s: %w", name, err)
		}
		var ours string
		v.locked(func() {
			ours = resourceVersionOf(v.index)
			if name != v.indexName {
				ours = resourceVersionOf(v.shard.cm)
			}
		})
		if serverRV != ours {
			return false, nil
		}
	}
	// The view holds the index's generation: not so while the shard that holds the pod's entry now has
	// not been read, or lags behind the index (resolveLocked keeps the view so far meanwhile).
	v.mu.Lock()
	defer v.mu.Unlock()
	_, resolved := protocol.ViewEntry(v.group, v.index, v.shard.cm, v.shard.read, v.pod, v.podUID)
	return resolved, nil
}

// heldView is what the view can vouch for to a node agent: the group incarnation and the generation
// such that every assignment of that incarnation, up to that generation, has reached the view.
type heldView struct {
	// published is false while the view holds no assignment ConfigMap.
	published  bool
	groupUID   types.UID
	generation int64
}

// held is what the view can vouch for; ok is false before the index has been read. While the shard that
// holds the pod's entry lags behind the index (resolveLocked keeps the view so far), the generation is
// that of the entry in force, not the index's: a later generation has not reached the view whole, and
// the agent must not count it as seen.
func (v *assignmentView) held() (h heldView, ok bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if !v.synced {
		return heldView{}, false
	}
	r := v.resolved
	if !r.valid || r.index != v.index || r.shard != v.shard.cm || r.shardRead != v.shard.read {
		r = resolvedEntry{index: v.index, shard: v.shard.cm, shardRead: v.shard.read, valid: true}
		r.entry, r.ok = protocol.ViewEntry(v.group, v.index, v.shard.cm, v.shard.read, v.pod, v.podUID)
		v.resolved = r
	}
	entry, resolved := r.entry, r.ok
	if !resolved {
		entry = v.entry
	}
	return heldView{published: entry.Exists, groupUID: entry.GroupUID, generation: entry.Generation}, true
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
func (v *assignmentView) serverResourceVersion(ctx context.Context, name string) (string, error) {
	rc, ok := v.cs.CoreV1().RESTClient().(*rest.RESTClient)
	if !ok || rc == nil {
		// A clientset without a REST client (a fake one) answers with the whole object.
		cm, err := v.cs.CoreV1().ConfigMaps(v.namespace).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return "", nil
		}
		if err != nil {
			return "", err
		}
		return cm.ResourceVersion, nil
	}
	body, err := rc.Get().Namespace(v.namespace).Resource("configmaps").Name(name).
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
