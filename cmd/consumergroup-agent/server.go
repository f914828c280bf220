package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/consumergroup-operator/consumergroup-operator/pkg/member"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/protocol"
)

// maxBodyBytes bounds request bodies: the only body is {"generation":N}.
const maxBodyBytes = 4 << 10

// maxLoadBodyBytes bounds a load report: tens of thousands of queues.
const maxLoadBodyBytes = 2 << 20

// limits bound how long a request may wait.
type limits struct {
	// defaultPoll and maxPoll are the long-poll's timeout when none is given, and the most it may ask.
	defaultPoll, maxPoll time.Duration
	// drain is the longest a drain waits, and its timeout when none is given.
	drain time.Duration
}

// server is the agent's HTTP API over one member client.
type server struct {
	client *member.Client
	limits limits
	// topics are the topics the operator assigns in the group; nil when the agent does not read them.
	topics *groupTopics
}

func newHandler(c *member.Client, l limits, topics *groupTopics) http.Handler {
	s := &server{client: c, limits: l, topics: topics}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/assignment", s.assignment)
	mux.HandleFunc("POST /v1/ack", s.ack)
	mux.HandleFunc("POST /v1/drain", s.drain)
	mux.HandleFunc("PUT /v1/load", s.load)
	mux.HandleFunc("GET /healthz", s.healthz)
	return muxErrorsAsJSON(mux)
}

// messageQueue is a queue as RocketMQ's MessageQueue serialises it, so Java clients can bind it directly.
type messageQueue struct {
	Topic      string `json:"topic"`
	BrokerName string `json:"brokerName"`
	QueueID    int32  `json:"queueId"`
}

// assignmentResponse is the body of GET /v1/assignment.
type assignmentResponse struct {
	// Generation is the assignment generation in force; 0 means consume nothing.
	Generation int64  `json:"generation"`
	Member     string `json:"member"`
	Group      string `json:"group"`
	Pod        string `json:"pod"`
	// Acked is the last generation acknowledged.
	Acked int64 `json:"acked"`
	// Queues are "topic/broker/id" strings.
	Queues        []string       `json:"queues"`
	MessageQueues []messageQueue `json:"messageQueues"`
	// Reason says why nothing is in force when generation is 0.
	Reason string `json:"reason,omitempty"`
	// AssignedTopics are the topics the operator assigns in the group, whether or not the pod has queues
	// of them: the ConsumerGroup's spec.topics and, when the group assigns it, its retry topic. Absent when
	// the agent could not read the ConsumerGroup. A client leaves the other topics to its own allocation.
	AssignedTopics []string `json:"assignedTopics,omitempty"`
}

func (s *server) response(a member.Assignment) assignmentResponse {
	st := s.client.Status()
	cfg := s.client.Config()
	resp := assignmentResponse{
		Generation:    a.Generation,
		Member:        a.Member,
		Group:         cfg.Group,
		Pod:           cfg.Pod,
		Acked:         st.AckedGeneration,
		Queues:        make([]string, len(a.Queues)),
		MessageQueues: make([]messageQueue, len(a.Queues)),
	}
	if resp.Member == "" {
		resp.Member = cfg.MemberID
	}
	if a.Generation == 0 {
		resp.Reason = st.Reason
	}
	if topics, ok := s.topics.get(); ok {
		resp.AssignedTopics = topics
	}
	for i, q := range a.Queues {
		resp.Queues[i] = q.String()
		resp.MessageQueues[i] = messageQueue{Topic: q.Topic, BrokerName: q.Broker, QueueID: q.ID}
	}
	return resp
}

// assignment returns the assignment in force; with after=N it waits, up to timeout, for one whose
// generation is not N, and returns the one in force when the timeout passes.
func (s *server) assignment(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if !q.Has("after") {
		writeJSON(w, http.StatusOK, s.response(s.client.Current()))
		return
	}
	after, err := strconv.ParseInt(q.Get("after"), 10, 64)
	if err != nil || after < 0 {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("after=%q: want the generation the caller holds, a whole number from 0", q.Get("after")))
		return
	}
	timeout, ok := s.timeout(w, r, s.limits.defaultPoll, s.limits.maxPoll)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), timeout)
	defer cancel()
	a, err := s.client.Next(ctx, after)
	if err != nil && r.Context().Err() != nil {
		return // the caller went away
	}
	writeJSON(w, http.StatusOK, s.response(a))
}

type ackRequest struct {
	Generation *int64 `json:"generation"`
}

func (s *server) ack(w http.ResponseWriter, r *http.Request) {
	var req ackRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBodyBytes))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil || req.Generation == nil {
		msg := `body must be {"generation": N}`
		if err != nil {
			msg += ": " + err.Error()
		}
		writeError(w, http.StatusBadRequest, msg)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	switch err := s.client.Ack(ctx, *req.Generation); {
	case errors.Is(err, member.ErrUnknownGeneration), errors.Is(err, member.ErrDrained):
		writeError(w, http.StatusConflict, err.Error())
	case errors.Is(err, member.ErrAckPending):
		// Kept and being written: the consumer carries on, as with a write that landed (a 200, which every
		// client takes as done); "pending" says which generation is still on its way to the Lease.
		writeJSON(w, http.StatusOK, map[string]any{"acked": s.client.Acked(), "pending": *req.Generation})
	case err != nil:
		writeError(w, http.StatusServiceUnavailable, err.Error())
	default:
		writeJSON(w, http.StatusOK, map[string]int64{"acked": s.client.Acked()})
	}
}

type loadRequest struct {
	Loads map[string]float64 `json:"loads"`
}

// load records the load of the queues the consumer reads; it reaches the operator with the next Lease
// renewal.
func (s *server) load(w http.ResponseWriter, r *http.Request) {
	var req loadRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxLoadBodyBytes))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil || req.Loads == nil {
		msg := `body must be {"loads": {"TOPIC/BROKER/ID": LOAD, ...}}`
		if err != nil {
			msg += ": " + err.Error()
		}
		writeError(w, http.StatusBadRequest, msg)
		return
	}
	loads := make(map[member.Queue]float64, len(req.Loads))
	for key, v := range req.Loads {
		q, err := protocol.ParseQueue(key)
		if err != nil {
			writeError(w, http.StatusBadRequest, err.Error())
			return
		}
		loads[q] = v
	}
	if err := s.client.ReportLoad(loads); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	writeJSON(w, http.StatusOK, map[string]int{"queues": len(loads)})
}

// drain is the pod's shutdown, for a preStop hook: it waits until the operator has released the pod's
// queues, then stops the member, which hands out, claims and acknowledges nothing more until the agent
// restarts (member.Client.Drain). A drain that times out changes nothing.
func (s *server) drain(w http.ResponseWriter, r *http.Request) {
	timeout, ok := s.timeout(w, r, s.limits.drain, s.limits.drain)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), timeout)
	defer cancel()
	if err := s.client.Drain(ctx); err != nil {
		if r.Context().Err() != nil {
			return
		}
		writeError(w, http.StatusGatewayTimeout, err.Error())
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"drained": true, "acked": s.client.Acked()})
}

type healthResponse struct {
	OK                  bool   `json:"ok"`
	Synced              bool   `json:"synced"`
	PublishedGeneration int64  `json:"publishedGeneration"`
	AckedGeneration     int64  `json:"ackedGeneration"`
	Generation          int64  `json:"generation"`
	LeaseRenewedAt      string `json:"leaseRenewedAt,omitempty"`
	Error               string `json:"error,omitempty"`
}

// healthz is healthy once the assignment has been read, the Lease is being renewed and the view is
// confirmed current (contact fencing), until a drain.
func (s *server) healthz(w http.ResponseWriter, _ *http.Request) {
	st := s.client.Status()
	resp := healthResponse{
		Synced:              st.Synced,
		PublishedGeneration: st.PublishedGeneration,
		AckedGeneration:     st.AckedGeneration,
		Generation:          st.InForce.Generation,
	}
	if !st.LeaseRenewedAt.IsZero() {
		resp.LeaseRenewedAt = st.LeaseRenewedAt.UTC().Format(time.RFC3339Nano)
	}
	resp.Error = st.Unhealthy()
	resp.OK = resp.Error == ""
	code := http.StatusOK
	if !resp.OK {
		code = http.StatusServiceUnavailable
	}
	writeJSON(w, code, resp)
}

// timeout reads the timeout query parameter: def when absent, an error when it is not a positive
// duration, and at most max.
func (s *server) timeout(w http.ResponseWriter, r *http.Request, def, maxTimeout time.Duration) (time.Duration, bool) {
	v := r.URL.Query().Get("timeout")
	if v == "" {
		return def, true
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("timeout=%q: want a positive duration such as 30s", v))
		return 0, false
	}
	return min(d, maxTimeout), true
}

func writeJSON(w http.ResponseWriter, code int, body any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(body)
}

func writeError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, map[string]string{"error": msg})
}

// muxErrorsAsJSON turns the mux's plain-text 404 and 405 into JSON errors, so every error has one shape.
func muxErrorsAsJSON(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		next.ServeHTTP(&jsonMuxError{ResponseWriter: w, r: r}, r)
	})
}

type jsonMuxError struct {
	http.ResponseWriter
	r          *http.Request
	suppressed bool
}

func (j *jsonMuxError) WriteHeader(code int) {
	h := j.Header()
	// The mux answers with http.Error, which writes text/plain; the agent's own handlers write JSON.
	if (code == http.StatusNotFound || code == http.StatusMethodNotAllowed) && strings.HasPrefix(h.Get("Content-Type"), "text/plain") {
		j.suppressed = true
		h.Del("X-Content-Type-Options")
		msg := fmt.Sprintf("no such endpoint: %s %s", j.r.Method, j.r.URL.Path)
		if code == http.StatusMethodNotAllowed {
			msg = fmt.Sprintf("%s is not allowed on %s (allowed: %s)", j.r.Method, j.r.URL.Path, h.Get("Allow"))
		}
		writeError(j.ResponseWriter, code, msg+"; the agent serves GET /v1/assignment, POST /v1/ack, POST /v1/drain, PUT /v1/load and GET /healthz")
		return
	}
	j.ResponseWriter.WriteHeader(code)
}

func (j *jsonMuxError) Write(b []byte) (int, error) {
	if j.suppressed {
		return len(b), nil
	}
	return j.ResponseWriter.Write(b)
}
