package manager

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	eventsv1client "k8s.io/client-go/kubernetes/typed/events/v1"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
)

// eventRecorder is the reconciler's event recorder. It is controller-runtime's (events.k8s.io, the same
// broadcaster), except that an event for a namespace being deleted is dropped quietly: the API server
// refuses new objects there, and client-go's events.k8s.io broadcaster would log every refusal as an
// error, so that deleting a namespace with a busy group in it would fill the operator's log with errors
// that say nothing is wrong. (client-go's older core/v1 event recorder drops them the same way.)
func eventRecorder(ctx context.Context, mgr ctrl.Manager, name string) (events.EventRecorder, error) {
	client, err := eventsv1client.NewForConfigAndClient(mgr.GetConfig(), mgr.GetHTTPClient())
	if err != nil {
		return nil, err
	}
	broadcaster := events.NewBroadcaster(terminatingNamespaceSink{events.EventSinkImpl{Interface: client}})
	// It sends until the manager's context ends.
	broadcaster.StartRecordingToSink(ctx.Done())
	return broadcaster.NewRecorder(mgr.GetScheme(), name), nil
}

// terminatingNamespaceSink is an event sink that reports an event refused because its namespace is being
// deleted as written: the broadcaster then neither retries nor logs it.
type terminatingNamespaceSink struct{ events.EventSinkImpl }

func (s terminatingNamespaceSink) Create(ctx context.Context, event *eventsv1.Event) (*eventsv1.Event, error) {
	return dropIfTerminating(s.EventSinkImpl.Create(ctx, event))
}

func (s terminatingNamespaceSink) Update(ctx context.Context, event *eventsv1.Event) (*eventsv1.Event, error) {
	return dropIfTerminating(s.EventSinkImpl.Update(ctx, event))
}

func (s terminatingNamespaceSink) Patch(ctx context.Context, event *eventsv1.Event, data []byte) (*eventsv1.Event, error) {
	return dropIfTerminating(s.EventSinkImpl.Patch(ctx, event, data))
}

func dropIfTerminating(event *eventsv1.Event, err error) (*eventsv1.Event, error) {
	if apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause) {
		return nil, nil
	}
	return event, err
}
