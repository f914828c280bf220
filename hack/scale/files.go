package main

import (
	"fmt"
	"os"
	"syscall"
)

// filesPerNode is how many files a run holds open per node, at most: the members of a node share one
// connection to the API server and call their agent in process (nodeAgents), the agent has its own
// connection to the API server; a member opens no file of its own. The rest is slack for the connections HTTP/2 opens past a server's
// stream limit. The result's openFiles shows what a run held.
const filesPerNode = 16

// raiseFileLimit lifts the limit on open files to what the members and agents of nodes need, as far as
// the process may: a real cluster spreads these connections over its nodes, a run holds them all in one
// machine. Without the privilege to raise the hard limit, it raises the soft one to the hard one.
func raiseFileLimit(nodes int) (uint64, error) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0, err
	}
	want := uint64(nodes*filesPerNode + 4096)
	if lim.Cur >= want {
		return lim.Cur, nil
	}
	raised := syscall.Rlimit{Cur: want, Max: max(lim.Max, want)}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &raised); err == nil {
		return want, nil
	}
	lim.Cur = lim.Max
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0, err
	}
	if lim.Cur < want {
		return lim.Cur, fmt.Errorf("%d nodes need about %d open files; this process may open %d (ulimit -n): run it as a user who may raise the limit", nodes, want, lim.Cur)
	}
	return lim.Cur, nil
}

// openFiles counts the files this process holds open now; -1 where /proc/self/fd cannot be read.
func openFiles() int {
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return -1
	}
	return len(entries)
}
