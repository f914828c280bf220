package nodeagent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
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

// Run reads the node view for the waiting requests until ctx ends. Requests that wait then, or arrive
// later, are answered 503. An agent runs once: a second call returns an error at once.
func (s *Server) Run(ctx context.Context) error {
	if !s.running.CompareAndSwap(false, true) {
		return errors.New("node agent is already running")
	}
	logger := klog.FromContext(ctx).WithValues("node", s.cfg.Node)
	s.reader.run(klog.NewContext(ctx, logger))
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

// serveConfirm authenticates the request, checks its body, and answers it with the next read.
func (s *Server) serveConfirm(w http.ResponseWriter, r *http.Request) {
	logger := klog.FromContext(r.Context())
	id, err := s.authenticate(r)
	switch {
	case isRefusal(err):
		logger.V(1).Info("Refused a token", "reason", err.Error(), "remote", r.RemoteAddr)
		writeAnswer(w, http.StatusUnauthorized, protocol.NodeAgentConfirmResponse{Reason: err.Error()})
		return
	case errors.Is(err, errTooManyReviews):
		logger.V(1).Info("Too many tokens to review", "remote", r.RemoteAddr)
		writeAnswer(w, http.StatusServiceUnavailable, protocol.NodeAgentConfirmResponse{Reason: err.Error()})
		return
	case err != nil:
		logger.Error(err, "Cannot review a token")
		writeAnswer(w, http.StatusServiceUnavailable, protocol.NodeAgentConfirmResponse{Reason: "the node agent cannot review tokens with the API server"})
		return
	}
	req, err := readRequest(http.MaxBytesReader(w, r.Body, protocol.MaxNodeAgentRequestBytes))
	if err != nil {
		writeAnswer(w, http.StatusBadRequest, protocol.NodeAgentConfirmResponse{Reason: err.Error()})
		return
	}
	q := query{namespace: id.Namespace, group: req.Group, groupUID: req.GroupUID, generation: req.Generation}
	a, err := s.reader.confirm(r.Context(), q)
	switch {
	case errors.Is(err, errNoNodeView):
		// 404, as an address with no agent: a member that has not settled its mode yet confirms its view
		// itself, for good, rather than wait for an operator that keeps no node views.
		writeAnswer(w, http.StatusNotFound, a)
		return
	case errors.Is(err, errBusy), errors.Is(err, errStopped):
		writeAnswer(w, http.StatusServiceUnavailable, protocol.NodeAgentConfirmResponse{Reason: err.Error()})
		return
	case err != nil:
		return // the client went away: nobody reads an answer
	}
	logger.V(2).Info("Answered a confirmation request", "pod", types.NamespacedName{Namespace: id.Namespace, Name: id.Pod},
		"group", req.Group, "generation", req.Generation, "confirmed", a.Confirmed, "reason", a.Reason)
	writeAnswer(w, http.StatusOK, a)
}

// authenticate is the pod the request's bearer token is bound to.
func (s *Server) authenticate(r *http.Request) (identity, error) {
	scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(token) == "" {
		return identity{}, refuse("the request carries no bearer token")
	}
	return s.tokens.identity(r.Context(), strings.TrimSpace(token))
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
	if msgs := validation.IsDNS1123Subdomain(req.Group); len(msgs) > 0 {
		return req, errors.New("the request's group is not a valid object name")
	}
	if req.Generation < 0 || req.Generation > protocol.MaxGeneration {
		return req, fmt.Errorf("the request's generation %d is outside 0 to %d", req.Generation, protocol.MaxGeneration)
	}
	return req, nil
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
