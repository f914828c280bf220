package version_test

import (
	"os/exec"
	"regexp"
	"runtime"
	"strings"
	"testing"

	"github.com/consumergroup-operator/consumergroup-operator/internal/testenv"
)

// TestVersionFlag builds both binaries, one stamped as a release with -ldflags -X and one as a developer
// build from this checkout, and reads what --version prints.
func TestVersionFlag(t *testing.T) {
	version := func(bin string) string {
		t.Helper()
		out, err := exec.Command(bin, "--version").Output()
		if err != nil {
			t.Fatalf("%s --version: %v", bin, err)
		}
		return string(out)
	}

	release := testenv.Build(t, "consumergroup-operator", ".", testenv.VersionStamp{Version: "1.2.3", Commit: "0123abc", Date: "2026-12-01T00:00:00Z"})
	want := "consumergroup-operator 1.2.3\ncommit: 0123abc\nbuilt: 2026-12-01T00:00:00Z\ngo: " + runtime.Version() + "\n"
	if got := version(release); got != want {
		t.Errorf("release --version:\n%s\nwant:\n%s", got, want)
	}

	dev := version(testenv.Build(t, "consumergroup-agent", "./cmd/consumergroup-agent", testenv.VersionStamp{}))
	lines := strings.Split(strings.TrimSpace(dev), "\n")
	if len(lines) != 4 || !strings.HasPrefix(lines[0], "consumergroup-agent ") || !strings.HasSuffix(lines[3], runtime.Version()) {
		t.Fatalf("developer build --version:\n%s", dev)
	}
	// A build from a git checkout carries the commit Go's VCS stamp recorded; one without (an archive)
	// says unknown.
	if !regexp.MustCompile(`^commit: ([0-9a-f]{40}( \(modified\))?|unknown)$`).MatchString(lines[1]) {
		t.Errorf("developer build commit line %q", lines[1])
	}
}
