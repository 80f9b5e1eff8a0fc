//go:build !race

package connector_test

// raceDetector says whether the race detector is on (its shadow memory
// multiplies what the process touches).
const raceDetector = false
