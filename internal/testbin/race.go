//go:build race

package testbin

const raceEnabled = true
