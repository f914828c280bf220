package testenv

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// VersionStamp is what `make build VERSION=...` sets in internal/version with -ldflags -X. The zero
// stamp builds as a developer does, and --version then reads Go's VCS stamp.
type VersionStamp struct{ Version, Commit, Date string }

func (s VersionStamp) ldflags() string {
	const pkg = "github.com/consumergroup-operator/consumergroup-operator/internal/version"
	var flags []string
	for _, v := range []struct{ name, value string }{{"Version", s.Version}, {"Commit", s.Commit}, {"Date", s.Date}} {
		if v.value != "" {
			flags = append(flags, "-X", pkg+"."+v.name+"="+v.value)
		}
	}
	return strings.Join(flags, " ")
}

// Build compiles the package src of this module ("." for the operator, "./cmd/consumergroup-agent" for
// the agent) into a temporary directory as name, stamped with stamp, and returns the binary's path: a test
// that runs a binary runs the code under test, not a stale bin/.
func Build(tb testing.TB, name, src string, stamp VersionStamp) string {
	tb.Helper()
	gomod, err := exec.Command("go", "env", "GOMOD").Output()
	Must(tb, err)
	bin := filepath.Join(tb.TempDir(), name)
	cmd := exec.Command("go", "build", "-ldflags", stamp.ldflags(), "-o", bin, src)
	cmd.Dir = filepath.Dir(strings.TrimSpace(string(gomod)))
	if out, err := cmd.CombinedOutput(); err != nil {
		tb.Fatalf("go build -o %s %s: %v\n%s", bin, src, err, out)
	}
	return bin
}
