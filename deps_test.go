package main

import (
	"go/build"
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
// member client links no strategy and no controller, the API types no algorithm, the kubectl plugin not
// the operator's manager.
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
		{"internal/kubectlcg", []string{"internal/manager"}},
	} {
		deps := moduleDeps(t, tc.pkg)
		for _, f := range tc.forbidden {
			if slices.Contains(deps, f) {
				t.Errorf("%s depends on %s (its dependencies: %s)", tc.pkg, f, strings.Join(deps, ", "))
			}
		}
	}
}
