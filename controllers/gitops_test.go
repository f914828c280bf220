//go:build envtest

package controllers

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	lua "github.com/yuin/gopher-lua"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/consumergroup-operator/consumergroup-operator/api/v1alpha1"
	"github.com/consumergroup-operator/consumergroup-operator/internal/testenv"
)

// TestGitOpsHealth reads a group from the API server in three states the operator put it in, and asks
// what GitOps tools would say of it: Flux's kstatus (status.Compute) and Argo CD's health check
// (config/argocd/health.lua, run by gopher-lua, the Lua interpreter Argo CD embeds).
func TestGitOpsHealth(t *testing.T) {
	ns, own, ms := settledGroup(t, "h", 12, 30, 3, memberOptions)
	expectHealth(t, ns, "healthy", status.CurrentStatus, "Healthy")

	// A member stops acknowledging while another joins: the queues it must give up wait for it.
	ms[0].Acking.Store(false)
	startSimMember(t, "h", testenv.Pod(ns, "h-3", "h").Create(t, k8s), own)
	expectHealth(t, ns, "a handoff in flight", status.InProgressStatus, "Progressing")

	// A member's weight annotation is not a number: nothing can be planned until someone fixes it.
	ms[0].Acking.Store(true)
	pod := ms[1].Pod.DeepCopy()
	must(t, k8s.Get(context.Background(), client.ObjectKeyFromObject(pod), pod))
	pod.Annotations = map[string]string{v1alpha1.WeightAnnotation: "heavy"}
	must(t, k8s.Update(context.Background(), pod))
	expectHealth(t, ns, "an invalid weight", status.FailedStatus, "Degraded")

	// Paused for an incident: nothing is published, by choice, not a fault. Argo CD has a state for that;
	// kstatus has none, and reads Ready=False as on its way.
	pauseGroup(t, ns, "h", true)
	expectHealth(t, ns, "a pause", status.InProgressStatus, "Suspended")
}

// expectHealth waits until kstatus and the Argo CD script say wantKstatus and wantArgo of the group as
// the API server has it.
func expectHealth(t *testing.T, ns, state string, wantKstatus status.Status, wantArgo string) {
	t.Helper()
	script, err := os.ReadFile(filepath.Join("..", "config", "argocd", "health.lua"))
	must(t, err)
	eventually(t, 30*time.Second, func() error {
		obj := &unstructured.Unstructured{}
		obj.SetGroupVersionKind(v1alpha1.GroupVersion.WithKind("ConsumerGroup"))
		if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "h"}, obj); err != nil {
			return err
		}
		res, err := status.Compute(obj)
		if err != nil {
			return err
		}
		argo, message, err := argoHealth(string(script), obj.Object)
		if err != nil {
			return err
		}
		if res.Status != wantKstatus || argo != wantArgo {
			return fmt.Errorf("with %s, kstatus says %s (%s) and Argo CD %s (%s); want %s and %s",
				state, res.Status, res.Message, argo, message, wantKstatus, wantArgo)
		}
		if strings.TrimSpace(message) == "" || !strings.Contains(message, ":") {
			return fmt.Errorf("with %s, Argo CD's message %q does not say why", state, message)
		}
		t.Logf("%s: kstatus %s (%s); Argo CD %s (%s)", state, res.Status, res.Message, argo, message)
		return nil
	})
}

// argoHealth runs an Argo CD health script on obj, as Argo CD does: obj is a global table, the script
// returns a table with status and message.
func argoHealth(script string, obj map[string]any) (healthStatus, message string, err error) {
	L := lua.NewState(lua.Options{SkipOpenLibs: false})
	defer L.Close()
	L.SetGlobal("obj", toLua(L, obj))
	fn, err := L.LoadString(script)
	if err != nil {
		return "", "", err
	}
	L.Push(fn)
	if err := L.PCall(0, 1, nil); err != nil {
		return "", "", err
	}
	hs, ok := L.Get(-1).(*lua.LTable)
	if !ok {
		return "", "", fmt.Errorf("the script returned %s, not a table", L.Get(-1).Type())
	}
	return hs.RawGetString("status").String(), hs.RawGetString("message").String(), nil
}

// toLua converts decoded JSON to Lua values: objects and arrays become tables (arrays indexed from 1).
func toLua(L *lua.LState, v any) lua.LValue {
	switch v := v.(type) {
	case map[string]any:
		t := L.NewTable()
		for k, e := range v {
			t.RawSetString(k, toLua(L, e))
		}
		return t
	case []any:
		t := L.NewTable()
		for _, e := range v {
			t.Append(toLua(L, e))
		}
		return t
	case string:
		return lua.LString(v)
	case bool:
		return lua.LBool(v)
	case int64:
		return lua.LNumber(v)
	case float64:
		return lua.LNumber(v)
	case nil:
		return lua.LNil
	}
	return lua.LString(fmt.Sprint(v))
}
