package main

import "C"

import (
	"runtime"
	"sync/atomic"
)

// A thread of the host program that calls into the library keeps the Go
// processor (P) it ran on when it returns to C: the runtime treats the
// return as a system call in progress (golang/go#57103). Such a P never
// goes through the scheduler, so its schedule count stands still, and
// after 10 ms the runtime's monitor (sysmon) takes the thread for a
// goroutine that has run too long: it preempts it when it is in Go and
// takes its P when it is in C, at each of its polls until the count
// moves, and each take sets sysmon polling every 20 µs again. A Python
// thread running 128 x 64 KiB batches (docs/DATAPATH-ROUNDS.md,
// thirty-third round) saw sysmon poll 1,400 times a second, 5.5 context
// switches per batch, and cost its process 350 µs of CPU per batch
// against 200 µs for the same batches from a Go program.
//
// So each calling thread takes a turn through the scheduler once per
// turnInterval while it keeps calling (kvconnect.c's take_turn, before
// a call): runtime.Gosched on a goroutine locked to its thread, two
// thread hand-offs, which moves its P's count. A thread that stops
// calling takes no turns: sysmon takes its P once, and then sleeps.

// turns counts the turns taken, for the engine's status.
var turns atomic.Uint64

// kvcgo_take_turn runs the calling thread's goroutine through the
// scheduler once.
//
//export kvcgo_take_turn
func kvcgo_take_turn() {
	turns.Add(1)
	runtime.Gosched()
}

// libraryStatus is what the library as a whole reports in each engine's
// status (kvc_engine_status_json's "library").
type libraryStatus struct {
	// SchedulerTurns counts the calling threads' turns through the Go
	// scheduler (kvcgo_take_turn), all engines together.
	SchedulerTurns uint64 `json:"scheduler_turns"`
}

func currentLibraryStatus() libraryStatus {
	return libraryStatus{SchedulerTurns: turns.Load()}
}
