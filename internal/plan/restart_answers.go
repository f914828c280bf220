package plan

import "time"

// RestartRenewGrace is how long after the operator saw a member's containers restart the member has to
// renew its Lease before it counts as cut off: a restarted process writes its Lease as soon as it starts.
const RestartRenewGrace = 3 * time.Second

// restartAnswerSlack is how long before the operator saw a restart a renewal still answers it: the
// restarted process may write its Lease before the kubelet reports that it started. A member that was cut
// off renewed last more than its contact timeout and a probe period before the restart.
const restartAnswerSlack = time.Second

// Answers reports whether a renewal seen at renewedAt (on the operator's clock) answers a restart seen at
// restartedAt: the restarted process wrote its Lease.
func Answers(renewedAt, restartedAt time.Time) bool {
	return !renewedAt.Before(restartedAt.Add(-restartAnswerSlack))
}
