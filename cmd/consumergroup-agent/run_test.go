package main

import (
	"context"
	"flag"
	"strings"
	"testing"

	"github.com/consumergroup-operator/consumergroup-operator/pkg/member"
)

func TestRunNamesMissingEnvironment(t *testing.T) {
	for _, name := range []string{member.EnvPodName, member.EnvPodNamespace, member.EnvPodUID, member.EnvConsumerGroup} {
		t.Setenv(name, "")
	}
	err := run(context.Background(), flag.NewFlagSet("agent", flag.ContinueOnError), nil)
	if err == nil || !strings.Contains(err.Error(), member.EnvPodUID) || !strings.Contains(err.Error(), member.EnvConsumerGroup) {
		t.Fatalf("run without the pod's environment returned %v, want an error naming the variables", err)
	}
}

// The agent's API has no authentication: it listens beyond the pod's loopback only when told to by name.
func TestRunRefusesNonLoopbackListenWithoutTheFlag(t *testing.T) {
	// A complete environment, so that what stops run is the address, not a missing variable.
	t.Setenv(member.EnvPodName, "consumer-0")
	t.Setenv(member.EnvPodNamespace, "shop")
	t.Setenv(member.EnvPodUID, "uid-0")
	t.Setenv(member.EnvConsumerGroup, "orders")
	kubeconfig := "-kubeconfig=" + t.TempDir() + "/missing"
	runWith := func(args ...string) error {
		ctx, cancel := context.WithCancel(context.Background())
		cancel() // were run to get as far as serving, it would stop at once
		return run(ctx, flag.NewFlagSet("agent", flag.ContinueOnError), append([]string{kubeconfig}, args...))
	}
	for _, addr := range []string{":8089", "0.0.0.0:8089", "[::]:8089", "10.0.3.17:8089", "consumer-0.example:8089", "[fe80::1%eth0]:8089"} {
		err := runWith("-listen=" + addr)
		if err == nil || !strings.Contains(err.Error(), "-"+allowNonLoopbackFlag) || !strings.Contains(err.Error(), addr) {
			t.Errorf("-listen=%s returned %v, want an error naming the address and -%s", addr, err, allowNonLoopbackFlag)
		}
		// With the flag, the address is accepted; run fails later, on the missing kubeconfig.
		err = runWith("-listen="+addr, "-"+allowNonLoopbackFlag)
		if err == nil || strings.Contains(err.Error(), allowNonLoopbackFlag) || !strings.Contains(err.Error(), "missing") {
			t.Errorf("-listen=%s -%s returned %v, want it to get past the address to the missing kubeconfig", addr, allowNonLoopbackFlag, err)
		}
	}
	for _, addr := range []string{"127.0.0.1:8089", "127.0.0.2:0", "[::1]:8089", "localhost:8089"} {
		if err := runWith("-listen=" + addr); err == nil || strings.Contains(err.Error(), allowNonLoopbackFlag) || !strings.Contains(err.Error(), "missing") {
			t.Errorf("-listen=%s returned %v, want it to get past the loopback address to the missing kubeconfig", addr, err)
		}
	}
}
