// Package version says which build of the operator or the agent is running: `--version` prints it, and
// the operator logs it at start. A release sets Version, Commit and Date with -ldflags -X (make build does
// for a VERSION); otherwise Commit and Date come from the VCS stamp Go writes into the binary, and Version
// is the module's version ("(devel)" for a build from a checkout).
package version

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// Set by -ldflags "-X github.com/consumergroup-operator/consumergroup-operator/internal/version.Version=...".
var (
	Version = ""
	Commit  = ""
	Date    = ""
)

// Info is one build's identity.
type Info struct {
	Version, Commit, Date, GoVersion string
	// Modified is set when the checkout had uncommitted changes.
	Modified bool
}

// Get returns this binary's identity.
func Get() Info {
	info := Info{Version: Version, Commit: Commit, Date: Date, GoVersion: runtime.Version()}
	if bi, ok := debug.ReadBuildInfo(); ok {
		if info.Version == "" {
			info.Version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				if info.Commit == "" {
					info.Commit = s.Value
				}
			case "vcs.time":
				if info.Date == "" {
					info.Date = s.Value
				}
			case "vcs.modified":
				info.Modified = s.Value == "true"
			}
		}
	}
	for _, f := range []*string{&info.Version, &info.Commit, &info.Date} {
		if *f == "" {
			*f = "unknown"
		}
	}
	return info
}

// String is what --version prints for the program named name.
func (i Info) String(name string) string {
	commit := i.Commit
	if i.Modified {
		commit += " (modified)"
	}
	return fmt.Sprintf("%s %s\ncommit: %s\nbuilt: %s\ngo: %s", name, i.Version, commit, i.Date, i.GoVersion)
}
