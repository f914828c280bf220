package main

import (
	"go/build"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/consumergroup-operator/consumergroup-operator"

// moduleDeps are the packages of this module that pkg imports, directly or not, read from the source as
// go list -deps would (with the build tags of a release build, so tests are not counted).
func moduleDeps(t *testing.T, pkg string) []string {
	t.Helper()
	seen := map[string]bool{}
	var walk func(path string)
	walk = func(path string) {
		p, err := build.Import(path, ".", 0)
		if err != nil {
			t.Fatalf("reading %s: %v", path, err)
		}
		for _, imp := range p.Imports {
			if strings.HasPrefix(imp, module+"/") && !seen[imp] {
				seen[imp] = true
				walk(imp)
			}
		}
	}
	walk(module + "/" + pkg)
	deps := make([]string, 0, len(seen))
	for d := range seen {
		deps = append(deps, strings.TrimPrefix(d, module+"/"))
	}
	slices.Sort(deps)
	return deps
}

// TestDependenciesPointOneWay keeps the packages' dependencies as the layout in the README draws them: the
// member client links no strategy and no controller, the API types no algorithm, the plan no I/O, the
// kubectl plugin neither the operator's manager nor its reconciler.
func TestDependenciesPointOneWay(t *testing.T) {
	for _, tc := range []struct {
		pkg       string
		forbidden []string
	}{
		{"pkg/member", []string{"pkg/allocate", "controllers", "api/v1alpha1"}},
		{"pkg/protocol", []string{"pkg/allocate", "controllers"}},
		{"pkg/queue", []string{"pkg/allocate", "pkg/protocol"}},
		{"pkg/allocate", []string{"api/v1alpha1", "pkg/protocol", "controllers"}},
		{"api/v1alpha1", []string{"pkg/allocate", "pkg/protocol", "controllers"}},
		{"internal/plan", []string{"controllers", "internal/observe", "internal/manager"}},
		{"internal/observe", []string{"controllers", "internal/manager"}},
		{"internal/kubectlcg", []string{"internal/manager", "controllers"}},
	} {
		deps := moduleDeps(t, tc.pkg)
		for _, f := range tc.forbidden {
			if slices.Contains(deps, f) {
				t.Errorf("%s depends on %s (its dependencies: %s)", tc.pkg, f, strings.Join(deps, ", "))
			}
		}
	}
}

// TestPlanDoesNoIO keeps internal/plan a package of values: neither it nor anything it imports reaches the
// API server (client-go) or a manager (controller-runtime), so its decisions are tested without a cluster.
func TestPlanDoesNoIO(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", "./internal/plan").Output()
	if err != nil {
		t.Fatalf("go list -deps ./internal/plan: %v", err)
	}
	deps := strings.Fields(string(out))
	if !slices.Contains(deps, module+"/internal/plan") {
		t.Fatalf("go list -deps ./internal/plan did not list the package itself: %s", out)
	}
	for _, d := range deps {
		for _, io := range []string{"sigs.k8s.io/controller-runtime", "k8s.io/client-go"} {
			if d == io || strings.HasPrefix(d, io+"/") {
				t.Errorf("internal/plan depends on %s", d)
			}
		}
	}
}

// builtModules are the modules whose packages `go list -deps pkgs`, run in dir, compiles, each at the
// version the build uses (a replacement's, where go.mod replaces it).
func builtModules(t *testing.T, dir string, pkgs ...string) map[string]string {
	t.Helper()
	args := append([]string{"list", "-deps", "-f", "{{with .Module}}{{.Path}} {{.Version}}{{with .Replace}} {{.Version}}{{end}}{{end}}"}, pkgs...)
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go %s in %s: %v", strings.Join(args, " "), dir, err)
	}
	versions := map[string]string{}
	for line := range strings.Lines(string(out)) {
		fields := strings.Fields(line)
		if len(fields) >= 2 {
			versions[fields[0]] = fields[len(fields)-1]
		}
	}
	return versions
}

// TestDemoBuildsWithTheClusterVersions keeps make run's cold build short: the demo and the kubectl plugin
// are built beside the cluster's binaries (hack/run.sh), and Go's build cache shares a compiled package
// between the two builds only when it and everything it imports are at the same versions. Every module both
// builds compile must therefore be at one version: the root go.mod and hack/envtest-bins/go.mod move
// together (raise the lower one).
func TestDemoBuildsWithTheClusterVersions(t *testing.T) {
	demo := builtModules(t, ".", "./hack/localdev", "./cmd/kubectl-cg")
	// The cluster's binaries are the tools hack/envtest-bins/go.mod names (hack/envtest-bins.sh builds "tool").
	cluster := builtModules(t, "hack/envtest-bins", "tool")
	if len(cluster) < 100 {
		t.Fatalf("the cluster's binaries build from %d modules; expected hundreds", len(cluster))
	}
	shared := 0
	for path, version := range demo {
		pinned, ok := cluster[path]
		if !ok {
			continue
		}
		shared++
		if version != pinned {
			t.Errorf("%s: the demo builds %s, the cluster's binaries %s", path, version, pinned)
		}
	}
	if shared < 50 {
		t.Errorf("the demo shares %d modules with the cluster's binaries; expected k8s.io/api, client-go and most of their dependencies", shared)
	}
}
