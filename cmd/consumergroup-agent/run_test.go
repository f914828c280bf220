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
