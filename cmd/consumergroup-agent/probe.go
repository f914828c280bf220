package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"time"
)

// probeCommand is the first argument that makes the agent a liveness probe instead of a server:
// `consumergroup-agent probe`, run by the kubelet in the agent's container (an exec probe), asks the agent
// of its pod for /healthz over loopback, which an httpGet probe cannot reach, and exits 1 unless it
// answers 200. An agent that cannot confirm its view (cut off from the API server, or hung) fails it: the
// kubelet restarts it, which tells the operator at once (docs/protocol.md, recovery within 20 s).
const probeCommand = "probe"

// probe runs the probe command with args, writing what failed to out; it returns the exit code.
func probe(ctx context.Context, args []string, out io.Writer) int {
	fs := flag.NewFlagSet(probeCommand, flag.ContinueOnError)
	fs.SetOutput(out)
	listen := fs.String("listen", "127.0.0.1:8089", "the address the agent serves its API on: its -listen")
	timeout := fs.Duration("timeout", time.Second, "how long to wait for the agent's answer")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if err := checkHealth(ctx, "http://"+*listen+"/healthz", *timeout); err != nil {
		_, _ = fmt.Fprintf(out, "consumergroup-agent is not healthy: %v\n", err)
		return 1
	}
	return 0
}

// checkHealth asks url for the agent's health within timeout: nil when it answers 200.
func checkHealth(ctx context.Context, url string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode == http.StatusOK {
		return nil
	}
	var h healthResponse
	// The answer is the agent's own and small; read at most what a health answer can be.
	if err := json.NewDecoder(io.LimitReader(resp.Body, 64<<10)).Decode(&h); err != nil || h.Error == "" {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return errors.New(h.Error)
}
