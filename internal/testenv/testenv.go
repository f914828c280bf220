// Package testenv starts the real control plane the project's tests run against: etcd and kube-apiserver
// from KUBEBUILDER_ASSETS (built from Go modules by hack/envtest-bins.sh; `make test` sets it), one per
// test package, shared by the package's tests.
package testenv

import (
	"fmt"
	"os"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// Main starts a control plane with the CRDs in crdDirs (none when empty), calls setup with it, runs the
// package's tests, stops the control plane and exits with the tests' code. Without KUBEBUILDER_ASSETS it
// fails the run with a message that says how to run the tests: skipping would count as passing.
func Main(m *testing.M, crdDirs []string, setup func(env *envtest.Environment, cfg *rest.Config) error) {
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		fmt.Fprintln(os.Stderr, "KUBEBUILDER_ASSETS is not set: run the tests with `make test`, which builds etcd and kube-apiserver (hack/envtest-bins.sh) and sets it")
		os.Exit(1)
	}
	env := &envtest.Environment{CRDDirectoryPaths: crdDirs, ErrorIfCRDPathMissing: len(crdDirs) > 0}
	cfg, err := env.Start()
	if err != nil {
		fmt.Fprintln(os.Stderr, "starting the test control plane:", err)
		os.Exit(1)
	}
	code := 1
	if err := setup(env, cfg); err != nil {
		fmt.Fprintln(os.Stderr, "setting up the tests:", err)
	} else {
		code = m.Run()
	}
	if err := env.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "stopping the test control plane:", err)
	}
	os.Exit(code)
}

// Eventually polls check until it returns nil, and fails t with check's last error once timeout has
// passed. Tests wait on the state of the world this way rather than sleeping; the timeouts are bounds that
// catch what never happens, not measurements.
func Eventually(t testing.TB, timeout time.Duration, check func() error) {
	t.Helper()
	Poll(t, timeout, 20*time.Millisecond, nil, check)
}

// Poll polls check every interval until it returns nil, and fails t with check's last error, and what
// describe adds (when not nil), once timeout has passed.
func Poll(t testing.TB, timeout, interval time.Duration, describe func() string, check func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			extra := ""
			if describe != nil {
				extra = "\n" + describe()
			}
			t.Fatalf("still failing after %v: %v%s", timeout, err, extra)
		}
		time.Sleep(interval)
	}
}
