//go:build race

package transporttest

const raceEnabled = true
