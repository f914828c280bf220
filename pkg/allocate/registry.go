package allocate

// registry maps every strategy name the API accepts to its constructor. It is written out here, not
// filled by init functions, so the set of strategies is visible in one place.
var registry = map[Name]Constructor{}
