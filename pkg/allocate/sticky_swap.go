package allocate

import (
	"math"
	"slices"
)

// This file is Sticky by load's last step: where a member is still above its aim, max((1+t)F_i, h_i),
// after the single moves of rebalance, one exchange of a queue of its for a cooler queue of another
// member (or one queue handed over) that puts both within their aims.

// swap exchanges queues while a member above its aim has an exchange that puts it and the other member
// within their aims, at most one exchange per member.
func (ls *loadState) swap() {
	for range len(ls.members) {
		done := false
		for _, d := range ls.aboveAim() {
			if c, ok := ls.bestSwap(d); ok {
				ls.exchange(d, c)
				done = true
				break
			}
		}
		if !done {
			return
		}
	}
}

// aim is member i's aim, max((1+t)F_i, h_i), given its hottest queue's load h.
func (ls *loadState) aim(i int32, h float64) float64 { return max(ls.ceiling(int(i)), h) * (1 + 1e-9) }

// aboveAim lists the members above their aim, in member order.
func (ls *loadState) aboveAim() []int32 {
	var over []int32
	for i := range int32(len(ls.members)) {
		if ls.load[i] > ls.aim(i, ls.hottest(int(i))) {
			over = append(over, i)
		}
	}
	return over
}

// topTwo returns the loads of member i's two hottest queues and the index in held[i] of the hottest.
func (ls *loadState) topTwo(i int32) (h1, h2 float64, at int) {
	at = -1
	for k, p := range ls.held[i] {
		switch l := ls.qload[p]; {
		case at < 0 || l > h1:
			h1, h2, at = l, h1, k
		case l > h2:
			h2 = l
		}
	}
	return h1, h2, at
}

// swapChoice is an exchange: held[d][a] goes to e and held[e][b] (none when b < 0) to d.
type swapChoice struct {
	e     int32
	a, b  int
	score float64 // the higher of the two members' loads over their shares after it
}

// canSwap reports whether some member above its aim has an exchange that puts it within.
func (ls *loadState) canSwap() bool {
	for _, d := range ls.aboveAim() {
		if _, ok := ls.bestSwap(d); ok {
			return true
		}
	}
	return false
}

// bestSwap finds the exchange between d and another member that puts both within their aims and leaves
// the higher of their two ratios lowest, ties in member and queue order. Cost: O(|held[d]|·Q).
func (ls *loadState) bestSwap(d int32) (swapChoice, bool) {
	d1, d2, dAt := ls.topTwo(d)
	best := swapChoice{score: math.Inf(1)}
	for e := range int32(len(ls.members)) {
		if e == d || ls.fair[e] == 0 {
			continue
		}
		e1, e2, eAt := ls.topTwo(e)
		for a, p := range ls.held[d] {
			lp := ls.qload[p]
			dRest := d1
			if a == dAt {
				dRest = d2
			}
			ls.consider(&best, d, e, a, -1, lp, 0, dRest, max(e1, lp))
			for b, r := range ls.held[e] {
				lr := ls.qload[r]
				if lr >= lp {
					continue
				}
				eRest := e1
				if b == eAt {
					eRest = e2
				}
				ls.consider(&best, d, e, a, b, lp, lr, max(dRest, lr), max(eRest, lp))
			}
		}
	}
	return best, !math.IsInf(best.score, 1)
}

// consider records in best the exchange of a queue of load lp from d for one of load lr from e (0 for
// none), after which d's hottest queue carries dHot and e's eHot, when both end within their aims and it
// beats best.
func (ls *loadState) consider(best *swapChoice, d, e int32, a, b int, lp, lr, dHot, eHot float64) {
	nd, ne := ls.load[d]-lp+lr, ls.load[e]+lp-lr
	if nd > ls.aim(d, dHot) || ne > ls.aim(e, eHot) {
		return
	}
	if score := max(nd/ls.fair[d], ne/ls.fair[e]); score < best.score {
		*best = swapChoice{e: e, a: a, b: b, score: score}
	}
}

// exchange makes the exchange c of member d.
func (ls *loadState) exchange(d int32, c swapChoice) {
	p := ls.held[d][c.a]
	ls.held[d] = slices.Delete(ls.held[d], c.a, c.a+1)
	ls.load[d] -= ls.qload[p]
	if c.b >= 0 {
		r := ls.held[c.e][c.b]
		ls.held[c.e][c.b] = p
		ls.load[c.e] += ls.qload[p] - ls.qload[r]
		ls.held[d] = append(ls.held[d], r)
		ls.load[d] += ls.qload[r]
		return
	}
	ls.held[c.e] = append(ls.held[c.e], p)
	ls.load[c.e] += ls.qload[p]
}
