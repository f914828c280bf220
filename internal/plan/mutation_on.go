//go:build handoffmutations

package plan

// handoffMutation names the rule of the handoff (docs/protocol.md) that is turned off: "acknowledgement",
// "lapse", "fence", "lateness", "restart", "giveback" or "nodeviews"; "" for none. Only a build with the
// handoffmutations tag has it as a variable; TestExploreFindsEachMutation sets it.
var handoffMutation string
