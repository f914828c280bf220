package allocate

import (
	"cmp"
	"fmt"
	"slices"
)

// byConfig is RocketMQ's AllocateMessageQueueByConfig, per member: each member gets exactly the list
// Params.Assignments holds for its id, in that order; members not listed get nothing.
//
// By default Allocate checks nothing, as RocketMQ does: a listed queue that does not exist, or a queue listed
// for two members, is handed out as configured. Whether that is acceptable depends on the message model (in
// broadcasting every member reads every queue anyway) and on timing (a topic briefly reporting fewer queues
// must not turn a running group's configuration into an error), so the decision is the caller's: with
// Params.Strict, Allocate refuses the whole configuration, whoever the members are right now, if any
// listed queue is not in Input.Queues or any queue is listed twice.
type byConfig struct {
	assignments map[string][]Queue
	strict      bool
}

func newByConfig(p Params) (Strategy, error) {
	for id := range p.Assignments {
		if id == "" {
			return nil, paramErrorf(`assignments[""]`, "member id must not be empty")
		}
	}
	return byConfig{assignments: p.Assignments, strict: p.Strict}, nil
}

func (s byConfig) Allocate(in Input) (Plan, error) {
	if s.strict {
		if err := validateAssignments(s.assignments, in.Queues); err != nil {
			return nil, err
		}
	}
	members := sortedMembers(in.Members)
	plan := make(Plan, len(members))
	for _, m := range members {
		plan[m.ID] = append([]Queue{}, s.assignments[m.ID]...)
	}
	return plan, nil
}

// validateAssignments is ByConfig's strict check: every listed queue exists in queues, and no queue is
// listed twice (for two members, or twice for one). The error is a *ParamError naming the first offending
// entry, with members in UTF-16 order so the message is stable.
func validateAssignments(assignments map[string][]Queue, queues []Queue) error {
	exists := make(map[Queue]bool, len(queues))
	for _, q := range queues {
		exists[q] = true
	}
	type entry struct {
		member string
		index  int
	}
	ids := make([]string, 0, len(assignments))
	for id := range assignments {
		ids = append(ids, id)
	}
	slices.SortFunc(ids, func(a, b string) int { return cmp.Or(CompareUTF16(a, b), cmp.Compare(a, b)) })
	seen := make(map[Queue]entry)
	for _, id := range ids {
		for i, q := range assignments[id] {
			if !exists[q] {
				return paramErrorf(assignmentField(id, i), "queue %s does not exist", q)
			}
			if first, dup := seen[q]; dup {
				return paramErrorf(assignmentField(id, i), "queue %s is already assigned at %s",
					q, assignmentField(first.member, first.index))
			}
			seen[q] = entry{id, i}
		}
	}
	return nil
}

// assignmentField is the path of member id's i-th configured queue.
func assignmentField(id string, i int) string {
	return fmt.Sprintf("assignments[%q][%d]", id, i)
}
