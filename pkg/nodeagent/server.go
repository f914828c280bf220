package nodeagent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/klog/v2"

	"github.com/consumergroup-operator/consumergroup-operator/pkg/protocol"
)

// Server is a node agent: its Handler answers the members' confirmation requests while Run reads the
// node view for them.
type Server struct {
	cfg     Config
	reader  *reader
	tokens  *reviewer
	running atomic.Bool
}

// New returns an agent for cfg. It talks to nothing until Run and requests.
func New(cfg Config) (*Server, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("node agent configuration: %w", err)
	}
	return &Server{cfg: cfg, reader: newReader(cfg), tokens: newReviewer(cfg)}, nil
}

// Run reads the node view for the waiting requests, and renews the agent's heartbeat Lease when it has
// one, until ctx ends; it returns once both have stopped. Requests that wait then, or arrive later, are
// answered 503. An agent runs once: a second call returns an error at once.
func (s *Server) Run(ctx context.Context) error {
	if !s.running.CompareAndSwap(false, true) {
		return errors.New("node agent is already running")
	}
	ctx = klog.NewContext(ctx, klog.FromContext(ctx).WithValues("node", s.cfg.Node))
	var heartbeat sync.WaitGroup
	if s.cfg.Heartbeat > 0 {
		heartbeat.Go(func() { runHeartbeat(ctx, s.cfg) })
	}
	s.reader.run(ctx)
	heartbeat.Wait()
	return nil
}

// Protocols are what an agent's HTTP server speaks: HTTP/1.1, and HTTP/2 without TLS for a client that
// knows it is there and sends the requests of many members over one connection.
func Protocols() *http.Protocols {
	p := new(http.Protocols)
	p.SetHTTP1(true)
	p.SetUnencryptedHTTP2(true)
	return p
}

// Handler serves the agent's API:
//
//	POST protocol.NodeAgentConfirmPath  confirm a member's view (a NodeAgentConfirmRequest)
//	GET  /healthz                       200 while the last read of the node view succeeded
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+protocol.NodeAgentConfirmPath, s.serveConfirm)
	mux.HandleFunc("GET /healthz", s.serveHealth)
	return mux
}

// serveConfirm authenticates the request, checks its body, and answers it with the next read. The token
// is reviewed before the body is read: an unauthenticated caller learns nothing of the body's checks.
func (s *Server) serveConfirm(w http.ResponseWriter, r *http.Request) {
	ctx := klog.NewContext(r.Context(), klog.FromContext(r.Context()).WithValues("remote", r.RemoteAddr))
	id, status, refused := s.admit(ctx, bearerToken(r))
	if status != http.StatusOK {
		writeAnswer(w, status, refused)
		return
	}
	req, err := readRequest(http.MaxBytesReader(w, r.Body, protocol.MaxNodeAgentRequestBytes))
	if err != nil {
		writeAnswer(w, http.StatusBadRequest, protocol.NodeAgentConfirmResponse{Reason: err.Error()})
		return
	}
	status, a, err := s.answer(ctx, id, req)
	if err != nil {
		return // the client went away: nobody reads an answer
	}
	writeAnswer(w, status, a)
}

// Confirm answers a member's confirmation request as the HTTP handler does, with the status the handler
// would send: it authenticates token, checks req, and waits for the next read. A program that runs
// members beside their agents in one process (hack/scale) calls it directly; members on a node ask over
// HTTP. It fails only when ctx ends before the answer.
func (s *Server) Confirm(ctx context.Context, token string, req protocol.NodeAgentConfirmRequest) (int, protocol.NodeAgentConfirmResponse, error) {
	id, status, refused := s.admit(ctx, token)
	if status != http.StatusOK {
		return status, refused, nil
	}
	if bad := checkRequest(req); bad != nil {
		// A refusal, answered as the handler answers it: not an error of the call.
		return http.StatusBadRequest, protocol.NodeAgentConfirmResponse{Reason: bad.Error()}, nil //nolint:nilerr // see above
	}
	return s.answer(ctx, id, req)
}

// admit is the pod token is bound to, with 200; or the status and answer that refuse the request.
func (s *Server) admit(ctx context.Context, token string) (identity, int, protocol.NodeAgentConfirmResponse) {
	logger := klog.FromContext(ctx)
	if strings.TrimSpace(token) == "" {
		return identity{}, http.StatusUnauthorized, protocol.NodeAgentConfirmResponse{Reason: "the request carries no bearer token"}
	}
	id, err := s.tokens.identity(ctx, token)
	switch {
	case isRefusal(err):
		logger.V(1).Info("Refused a token", "reason", err.Error())
		return id, http.StatusUnauthorized, protocol.NodeAgentConfirmResponse{Reason: err.Error()}
	case errors.Is(err, errTooManyReviews):
		logger.V(1).Info("Too many tokens to review")
		return id, http.StatusServiceUnavailable, protocol.NodeAgentConfirmResponse{Reason: err.Error()}
	case err != nil:
		logger.Error(err, "Cannot review a token")
		return id, http.StatusServiceUnavailable, protocol.NodeAgentConfirmResponse{Reason: "the node agent cannot review tokens with the API server"}
	}
	return id, http.StatusOK, protocol.NodeAgentConfirmResponse{}
}

// answer is the answer to id's checked request req, from the next read; it fails when ctx ends first.
func (s *Server) answer(ctx context.Context, id identity, req protocol.NodeAgentConfirmRequest) (int, protocol.NodeAgentConfirmResponse, error) {
	q := query{namespace: id.Namespace, group: req.Group, groupUID: req.GroupUID, generation: req.Generation}
	a, err := s.reader.confirm(ctx, q)
	switch {
	case errors.Is(err, errNoNodeView):
		// 404, as an address with no agent: a member that has not settled its mode yet confirms its view
		// itself, for good, rather than wait for an operator that keeps no node views.
		return http.StatusNotFound, a, nil
	case errors.Is(err, errBusy), errors.Is(err, errStopped):
		return http.StatusServiceUnavailable, protocol.NodeAgentConfirmResponse{Reason: err.Error()}, nil
	case err != nil:
		return 0, protocol.NodeAgentConfirmResponse{}, err
	}
	klog.FromContext(ctx).V(2).Info("Answered a confirmation request", "pod", types.NamespacedName{Namespace: id.Namespace, Name: id.Pod},
		"group", req.Group, "generation", req.Generation, "confirmed", a.Confirmed, "reason", a.Reason)
	return http.StatusOK, a, nil
}

// bearerToken is the request's bearer token, or "" when it carries none.
func bearerToken(r *http.Request) string {
	scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return ""
	}
	return strings.TrimSpace(token)
}

// readRequest decodes and checks a confirmation request. Fields it does not know are ignored: a newer
// member may send more.
func readRequest(body io.Reader) (protocol.NodeAgentConfirmRequest, error) {
	var req protocol.NodeAgentConfirmRequest
	if err := json.NewDecoder(body).Decode(&req); err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return req, fmt.Errorf("the request is larger than %d bytes", protocol.MaxNodeAgentRequestBytes)
		}
		return req, errors.New("the request is not a JSON confirmation request")
	}
	return req, checkRequest(req)
}

// checkRequest checks a confirmation request's fields.
func checkRequest(req protocol.NodeAgentConfirmRequest) error {
	if msgs := validation.IsDNS1123Subdomain(req.Group); len(msgs) > 0 {
		return errors.New("the request's group is not a valid object name")
	}
	if req.Generation < 0 || req.Generation > protocol.MaxGeneration {
		return fmt.Errorf("the request's generation %d is outside 0 to %d", req.Generation, protocol.MaxGeneration)
	}
	return nil
}

// healthAnswer is the body of /healthz.
type healthAnswer struct {
	Error string `json:"error,omitempty"`
}

func (s *Server) serveHealth(w http.ResponseWriter, _ *http.Request) {
	if err := s.reader.health(); err != nil {
		writeJSON(w, http.StatusServiceUnavailable, healthAnswer{Error: "the last read of the node view failed: " + err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, healthAnswer{})
}

func writeAnswer(w http.ResponseWriter, status int, a protocol.NodeAgentConfirmResponse) {
	writeJSON(w, status, a)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v) // the client may have gone; nothing else to do
}
