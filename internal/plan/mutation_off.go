//go:build !handoffmutations

package plan

// handoffMutation names a rule of the handoff (docs/protocol.md) that the exhaustive explorer's mutation
// test turns off, to show that the explorer notices its absence. In a build without the handoffmutations
// tag it is the empty constant, so every guard on it is decided at compile time and costs nothing.
const handoffMutation = ""
