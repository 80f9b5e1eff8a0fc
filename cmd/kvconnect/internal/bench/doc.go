// Package bench measures kvconnect's data path, the way Mooncake's
// transfer_engine_bench does: threads submit batches of READ or WRITE ops
// of one block size against a peer's buffer for a duration, and the run
// reports throughput (GB/s, 1 GB = 1e9 B), ops/s, batch latency p50/p99 and
// the CPU seconds used by the host process and by each transport plugin
// process.
//
// Besides a kvconnect node pair (Pair, Run, Target) it has a raw baseline
// (Raw: plain Go TCP sockets moving the same block sizes in the same
// batches over the same number of connections, the best a Go socket does
// for that shape of work) and a suite (RunSuite) that measures every
// variant alternating round by round, so the machine's noise hits all of
// them alike, and renders a markdown table of medians and ratios to the
// baseline. The kvconnect bench command is a thin layer over this package.
package bench
