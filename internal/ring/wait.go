package ring

// Wait says what a thread sleeping on a ring's futex does with its Go
// processor (a P, one of GOMAXPROCS) while it sleeps.
type Wait uint8

const (
	// Brief keeps the processor, as any system call through the runtime
	// does, until the runtime's monitor (sysmon) takes it back, 20 µs or
	// more into the sleep. A wake-up that comes first resumes at once,
	// with no processor to find: for sleeps expected to be short, such as
	// the next of one caller's batches.
	Brief Wait = iota
	// Handoff gives the processor to the process's other goroutines
	// before the thread sleeps, and a wake-up finds one again (where the
	// platform has no hand-off, it is Brief). For sleeps while the
	// process has other work, such as concurrent batches: each time the
	// monitor takes a processor back from a sleeper it returns to
	// polling every 20 µs, each poll a context switch: on a VM with two
	// vCPUs the plugin processes switched 20–21 times per 64 KiB batch
	// with Brief, 14–16 with Handoff (docs/DATAPATH-ROUNDS.md, fifteenth round).
	// A lone small op pays more for finding a processor again than it
	// saves: 4 KiB single ops through a plugin whose sleeper always
	// handed off ran 14–24 % fewer ops per second there.
	Handoff
)

// String names w for logs.
func (w Wait) String() string {
	switch w {
	case Brief:
		return "brief"
	case Handoff:
		return "handoff"
	}
	return "unknown"
}
