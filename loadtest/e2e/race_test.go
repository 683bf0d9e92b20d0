//go:build race

package e2e

// raceEnabled: the test binary runs with the race detector (make test), so
// the Ferry binaries it starts are built with it too.
const raceEnabled = true
