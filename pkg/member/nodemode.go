package member

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"k8s.io/klog/v2"

	"github.com/consumergroup-operator/consumergroup-operator/pkg/protocol"
)

// confirmMode is how a member in node mode confirms its view, settled by its first request to the agent.
type confirmMode int32

const (
	// modeUndecided: the agent has not answered yet.
	modeUndecided confirmMode = iota
	// modeNode: the agent answered once, and confirms from then on. An agent that stops answering later
	// is a failure to confirm, which fences the member; not a reason to read the API server instead.
	modeNode
	// modePerMember: the first request could not reach the agent (none runs on the node, or an older
	// release); the member confirms with its own reads for the rest of its life.
	modePerMember
)

// agentUnreachable says that no agent is there: the connection could not be made (refused, no route, no
// such host, or no answer to it within agentDialTimeout, as when a Service has no endpoint on the node),
// or the address serves something else (404). An agent that accepted the connection and answers late is
// there: it is slow, which fails this confirmation, not the mode.
type agentUnreachable struct{ err error }

func (u agentUnreachable) Error() string { return "the node agent cannot be reached: " + u.err.Error() }
func (u agentUnreachable) Unwrap() error { return u.err }

// nodeConfirmer confirms the member's view by asking the node agent (docs/protocol.md, node mode): the
// agent answers with a read of its node view sent after the request arrived, which confirms the view when
// its line for the group asks for no later generation than the view holds.
type nodeConfirmer struct {
	url    string
	token  func() (string, error)
	group  string
	client *http.Client
	// call, when set, asks the agent in this process instead of over HTTP (Config.NodeAgentCall).
	call func(context.Context, string, protocol.NodeAgentConfirmRequest) (int, protocol.NodeAgentConfirmResponse, error)
	view *assignmentView
	// perMemberTimeout bounds a confirmation by the member's own read, in per-member mode.
	perMemberTimeout time.Duration
	mode             atomic.Int32
	// firstAnswered is called once, when the agent first answers: the member's Lease then says that it
	// confirms through the agent (protocol.ConfirmsThroughAnnotation), so that the agent's heartbeat
	// counts for it. Nil for none.
	firstAnswered func()
}

func newNodeConfirmer(cfg Config, view *assignmentView) *nodeConfirmer {
	// No proxy from the environment: the agent is on the pod's node, reached at the node's IP.
	client := cfg.NodeAgentClient
	if client == nil {
		client = &http.Client{Transport: &http.Transport{DialContext: (&net.Dialer{Timeout: agentDialTimeout}).DialContext, MaxIdleConnsPerHost: 1, IdleConnTimeout: time.Minute}}
	}
	return &nodeConfirmer{
		url:   strings.TrimSuffix(cfg.NodeAgent, "/") + protocol.NodeAgentConfirmPath,
		token: cfg.NodeAgentToken, group: cfg.Group, client: client, call: cfg.NodeAgentCall, view: view,
		perMemberTimeout: perMemberAttemptTimeout(protocol.ContactInterval(cfg.ContactTimeout)),
	}
}

// confirmsThroughAgent reports whether the agent has answered, which settles node mode for good.
func (n *nodeConfirmer) confirmsThroughAgent() bool { return confirmMode(n.mode.Load()) == modeNode }

// confirm reports whether the view is current as of a request sent now.
func (n *nodeConfirmer) confirm(ctx context.Context) (bool, error) {
	if confirmMode(n.mode.Load()) == modePerMember {
		return n.confirmPerMember(ctx)
	}
	held, ok := n.view.held()
	switch {
	case !ok:
		return false, nil
	case !held.published:
		// No assignment yet: no line of the node view can vouch for generation 0, so the member checks
		// with a read of its own that none exists. Either kind of confirmation says the same: what was
		// published before it was sent has reached the view.
		return n.confirmPerMember(ctx)
	}
	answer, err := n.ask(ctx, protocol.NodeAgentConfirmRequest{Group: n.group, GroupUID: held.groupUID, Generation: held.generation})
	if confirmMode(n.mode.Load()) == modeUndecided {
		switch {
		case unreachable(ctx, err):
			if n.mode.CompareAndSwap(int32(modeUndecided), int32(modePerMember)) {
				klog.FromContext(ctx).Info("Cannot reach the node agent; confirming the assignment view with the member's own reads from now on", "nodeAgent", n.url, "reason", err.Error())
			}
			return n.confirmPerMember(ctx)
		case err == nil || answered(err):
			if n.mode.CompareAndSwap(int32(modeUndecided), int32(modeNode)) {
				klog.FromContext(ctx).Info("Confirming the assignment view through the node agent", "nodeAgent", n.url)
				if n.firstAnswered != nil {
					n.firstAnswered()
				}
			}
		}
	}
	if err != nil {
		return false, err
	}
	if !answer.Confirmed {
		return false, fmt.Errorf("the node agent did not confirm generation %d: %s", held.generation, answer.Reason)
	}
	return true, nil
}

func (n *nodeConfirmer) confirmPerMember(ctx context.Context) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, n.perMemberTimeout)
	defer cancel()
	return n.view.confirm(ctx)
}

// agentRefusal is an answer of the agent other than 200: the agent is there, and said no.
type agentRefusal struct {
	status int
	reason string
}

func (r agentRefusal) Error() string {
	return fmt.Sprintf("the node agent answered %d %s: %s", r.status, http.StatusText(r.status), r.reason)
}

func answered(err error) bool {
	var r agentRefusal
	return errors.As(err, &r)
}

// unreachable reports whether err says that no agent answered. A request cut short because the member is
// stopping says nothing about the agent.
func unreachable(ctx context.Context, err error) bool {
	var u agentUnreachable
	return errors.As(err, &u) && !errors.Is(ctx.Err(), context.Canceled)
}

// agentDialTimeout bounds the connection to the agent: on the pod's own node, it is made at once or not
// at all.
const agentDialTimeout = time.Second

// maxAnswerBytes bounds what the member reads of an answer: the agent's are a few hundred bytes.
const maxAnswerBytes = 64 << 10

// ask sends req to the agent with the pod's token.
func (n *nodeConfirmer) ask(ctx context.Context, req protocol.NodeAgentConfirmRequest) (protocol.NodeAgentConfirmResponse, error) {
	token, err := n.token()
	if err != nil {
		return protocol.NodeAgentConfirmResponse{}, err
	}
	send := n.post
	if n.call != nil {
		send = n.call
	}
	status, answer, err := send(ctx, token, req)
	switch {
	case err != nil:
		return answer, err
	case status == http.StatusNotFound:
		return answer, agentUnreachable{err: fmt.Errorf("%s answers 404: no node agent serves it", n.url)}
	case status != http.StatusOK:
		return protocol.NodeAgentConfirmResponse{}, agentRefusal{status: status, reason: answer.Reason}
	}
	return answer, nil
}

// post sends req to the agent over HTTP, and returns the status and answer.
func (n *nodeConfirmer) post(ctx context.Context, token string, req protocol.NodeAgentConfirmRequest) (int, protocol.NodeAgentConfirmResponse, error) {
	var answer protocol.NodeAgentConfirmResponse
	body, err := json.Marshal(req)
	if err != nil {
		return 0, answer, err
	}
	httpReq, err := http.NewRequestWithContext(ctx, http.MethodPost, n.url, bytes.NewReader(body))
	if err != nil {
		return 0, answer, err
	}
	httpReq.Header.Set("Authorization", "Bearer "+token)
	httpReq.Header.Set("Content-Type", "application/json")
	resp, err := n.client.Do(httpReq)
	var dial *net.OpError
	switch {
	case errors.As(err, &dial) && dial.Op == "dial":
		return 0, answer, agentUnreachable{err: err}
	case err != nil:
		return 0, answer, fmt.Errorf("asking the node agent: %w", err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode == http.StatusNotFound {
		return resp.StatusCode, answer, nil
	}
	decodeErr := json.NewDecoder(io.LimitReader(resp.Body, maxAnswerBytes)).Decode(&answer)
	if resp.StatusCode == http.StatusOK && decodeErr != nil {
		return 0, answer, agentRefusal{status: resp.StatusCode, reason: "the answer is not JSON"}
	}
	return resp.StatusCode, answer, nil
}
