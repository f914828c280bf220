package manager

import (
	"errors"
	"io/fs"
	"strconv"
	"strings"
)

// The files a container's memory limit is read from: cgroup v2's, then v1's.
const (
	cgroupV2MemoryMax = "/sys/fs/cgroup/memory.max"
	cgroupV1MemoryMax = "/sys/fs/cgroup/memory/memory.limit_in_bytes"
)

// softLimitShare is the part of the container's memory limit the Go runtime's soft limit is set to: the
// rest is for what the runtime does not count (the binary's pages, memory the kernel holds for it).
const softLimitShare = 0.9

// SoftMemoryLimit is the soft memory limit (runtime/debug.SetMemoryLimit) the operator sets: nine tenths
// of its container's memory limit, 0 (none) when GOMEMLIMIT is set, which the runtime has read itself, or
// when the container has no limit. By default the collector lets the heap grow to twice what was live at
// the last collection, and most of the operator's resident memory is that headroom and memory not yet
// returned (docs/performance.md); with a soft limit it collects harder as the heap nears the limit rather
// than let the container be killed. getenv and readFile are os.Getenv and os.ReadFile, or a test's.
func SoftMemoryLimit(getenv func(string) string, readFile func(string) ([]byte, error)) (int64, error) {
	if getenv("GOMEMLIMIT") != "" {
		return 0, nil
	}
	for _, file := range []string{cgroupV2MemoryMax, cgroupV1MemoryMax} {
		data, err := readFile(file)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return 0, err
		}
		limit, err := parseMemoryMax(string(data))
		if err != nil {
			return 0, err
		}
		return int64(float64(limit) * softLimitShare), nil
	}
	return 0, nil
}

// DefaultGCPercent is the garbage collector's target the operator runs with (--gc-percent) unless GOGC is
// set: the heap may grow this many percent above what was live after the last collection before the
// next one starts. Go's own default, 100, lets the heap double between collections, and what the
// operator's memory grows with is its member pods' cached objects, live for as long as the pods run. At
// 5,000 member pods, 25 held 9.1 KB of resident memory a pod where 100 held 14.4, for 10 % more CPU over
// the pods' start and 3 % more after it (docs/performance.md).
const DefaultGCPercent = 25

// GCPercent is the garbage collector's target the operator sets (runtime/debug.SetGCPercent): percent,
// or none (false) when GOGC is set, which the runtime has read itself.
func GCPercent(getenv func(string) string, percent int) (int, bool) {
	if getenv("GOGC") != "" {
		return 0, false
	}
	return percent, true
}

// unlimitedV1 is above any real limit: cgroup v1 writes the largest page-aligned int64 for none.
const unlimitedV1 = 1 << 62

// parseMemoryMax reads a cgroup memory limit file: a number of bytes, or "max" (v2) or a huge number
// (v1) for none, which is 0.
func parseMemoryMax(s string) (int64, error) {
	s = strings.TrimSpace(s)
	if s == "max" {
		return 0, nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	switch {
	case err != nil:
		return 0, err
	case n <= 0 || n >= unlimitedV1:
		return 0, nil
	}
	return n, nil
}
