package connector

import "time"

// SetRestartBackoff replaces the restart schedule for a test and returns
// a function that puts it back.
func SetRestartBackoff(d []time.Duration) func() {
	old := restartBackoff
	restartBackoff = d
	return func() { restartBackoff = old }
}
