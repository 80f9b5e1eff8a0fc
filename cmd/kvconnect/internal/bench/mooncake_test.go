package bench

import (
	"os"
	"testing"
	"time"
)

// TestMooncakeRunCountsEnoughBatches: a Mooncake measurement that counts
// fewer batches than it should is run again, longer (and the workload's
// later runs last as long), since Mooncake's bench counts whole batches;
// and a run lasts at least its minimum.
func TestMooncakeRunCountsEnoughBatches(t *testing.T) {
	dir := os.Getenv("KVCONNECT_MOONCAKE_BIN")
	if dir == "" {
		t.Skip("set KVCONNECT_MOONCAKE_BIN to the directory holding Mooncake's transfer_engine_bench (e.g. ../shared/mooncake/bin)")
	}
	const buf = 64 << 20
	tgt, err := startMooncakeTarget(t.Context(), dir, buf)
	if err != nil {
		t.Fatal(err)
	}
	defer tgt.stop()
	// More batches than one second can count here: the run is redone in
	// maxSecs.
	m := &mooncakeInitiator{dir: dir, session: tgt.session, bufSize: buf, minBatches: 1 << 30, maxSecs: 2}
	w := Workload{Op: Write, BlockSize: 16 << 10, BatchSize: 16, Threads: 1, Duration: time.Second}
	r, err := m.run(t.Context(), w, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	if m.secs[w] != 2 || r.Seconds < 2 || r.Batches == 0 {
		t.Fatalf("a run that counted too few batches: learned %d s, measured %.2f s and %d batches; want it redone in 2 s", m.secs[w], r.Seconds, r.Batches)
	}
	// Enough batches: as asked.
	m = &mooncakeInitiator{dir: dir, session: tgt.session, bufSize: buf, minBatches: 1, maxSecs: 2}
	if r, err = m.run(t.Context(), w, nil, ""); err != nil {
		t.Fatal(err)
	}
	if len(m.secs) != 0 || r.Seconds >= 2 {
		t.Fatalf("a run that counted enough batches was redone (learned %v, measured %.2f s)", m.secs, r.Seconds)
	}
	// A minimum longer than the workload's duration: the run lasts it,
	// once.
	m = &mooncakeInitiator{dir: dir, session: tgt.session, bufSize: buf, minBatches: 1, minSecs: 2, maxSecs: 5}
	if r, err = m.run(t.Context(), w, nil, ""); err != nil {
		t.Fatal(err)
	}
	if len(m.secs) != 0 || r.Seconds < 2 {
		t.Fatalf("a run with a 2 s minimum: learned %v, measured %.2f s; want one run of 2 s", m.secs, r.Seconds)
	}
}
