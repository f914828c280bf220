package allocate

// registry maps every strategy name the API accepts to its constructor. It is written out here, not
// filled by init functions, so the set of strategies is visible in one place.
var registry = map[Name]Constructor{
	Averagely:         newAveragely,
	AveragelyByCircle: newAveragelyByCircle,
	ConsistentHash:    newConsistentHash,
	MachineRoomNearby: newMachineRoomNearby,
	ByMachineRoom:     newByMachineRoom,
	ByConfig:          newByConfig,
	Sticky:            newSticky,
}

// MachineRoomNearby builds its inner strategy from the registry, which a function listed in the registry
// cannot reference directly (Go rejects the initialization cycle); this closes the loop once, at start-up.
func init() {
	innerConstructor = func(n Name) (Constructor, bool) {
		c, ok := registry[n]
		return c, ok
	}
}
