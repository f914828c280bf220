package main

import (
	"fmt"
	"syscall"
)

// filesPerPod is how many files a run holds open per member pod, at most: the members of a node share
// their connections to the API server and to their agent (HTTP/2), so a pod costs its share of a few
// connections a node, at both ends (the API server and etcd are this program's children, and inherit
// its limit), and the files its member's client opens.
const filesPerPod = 1

// raiseFileLimit lifts the limit on open files to what pods members need, as far as the process may: a
// real cluster spreads these connections over its nodes, a run holds them all in one machine. Without the
// privilege to raise the hard limit, it raises the soft one to the hard one.
func raiseFileLimit(pods int) (uint64, error) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0, err
	}
	want := uint64(pods*filesPerPod + 4096)
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
		return lim.Cur, fmt.Errorf("%d pods need about %d open files; this process may open %d (ulimit -n): run it as a user who may raise the limit", pods, want, lim.Cur)
	}
	return lim.Cur, nil
}
