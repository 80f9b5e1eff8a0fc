// Package soak runs kvconnect nodes moving verified blocks without pause
// while it injects faults at random: plugin kills (the initiator's and the
// targets'), peer restarts on the same address, hung peers (SIGSTOP),
// link cuts (when network namespaces are available) and hostile
// connections. It ends with a Report: bytes moved, blocks verified,
// corrupted blocks, ops failed by reason, faults and how fast each
// recovered, and what leaked (goroutines, fds, sockets, processes,
// /dev/shm files).
//
// `make soak` runs it (SOAK_DURATION, default 30m); `go test` runs a
// short one. See docs/RELIABILITY.md.
package soak
