//go:build linux

package connector_test

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/kvconnect/kvconnect/config"
	"github.com/kvconnect/kvconnect/connector"
	"github.com/kvconnect/kvconnect/internal/fdlimit"
	"github.com/kvconnect/kvconnect/internal/ring"
	"github.com/kvconnect/kvconnect/internal/testbin"
)

// The many-regions node runs in a child process (this test binary again)
// with RLIMIT_NOFILE 1024, inherited by its plugin process.
const (
	manyRegionsEnv   = "KVCONNECT_TEST_MANY_REGIONS_NODE"
	manyRegionsCount = 100_000
	manyRegionsSize  = 4096
	manyRegionsLimit = 1024
)

// TestHundredThousandRegions: a node under RLIMIT_NOFILE 1024 registers
// 100,000 regions of 4 KiB with the tcp plugin; a peer opens it (its
// descriptor lists every region, as Mooncake buffers), and reads and
// writes several of them by id and by absolute address. The node's and
// its plugin's descriptors and mappings stay a handful, and go back to
// where they were once the regions are freed.
func TestHundredThousandRegions(t *testing.T) {
	testbin.Long(t, "registers 100,000 regions: minutes under the race detector")
	dir := pluginDir(t)
	child := exec.Command(os.Args[0], "-test.run=^TestManyRegionsNode$", "-test.v")
	child.Env = append(os.Environ(), manyRegionsEnv+"="+dir)
	stdin, err := child.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	child.Stderr = os.Stderr
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	defer child.Wait()
	defer stdin.Close()
	lines := bufio.NewScanner(stdout)
	expect := func(prefix string) string {
		t.Helper()
		for lines.Scan() {
			line := lines.Text()
			if v, ok := strings.CutPrefix(line, prefix); ok {
				return v
			}
			if strings.HasPrefix(line, "FAIL") || strings.HasPrefix(line, "--- FAIL") || strings.HasPrefix(line, "panic") {
				t.Fatalf("the node failed: %s", line)
			}
			t.Log("node: " + line)
		}
		t.Fatalf("the node ended before printing %q: %v", prefix, lines.Err())
		return ""
	}
	session := expect("session=")

	ctx := context.Background()
	// Opening moves a descriptor of 100,000 regions to the peer and its
	// plugin; on a loaded machine that takes longer than the default
	// connect_timeout, which is not what this test is about.
	a, err := connector.New(ctx, connector.Config{Protocol: "tcp", PluginDir: pluginDir(t), ConnectTimeout: 2 * time.Minute},
		connector.WithLogger(zaptest.NewLogger(t)))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	start := time.Now()
	peer, err := a.Open(ctx, session)
	if err != nil {
		t.Fatalf("opening the node with %d regions: %v", manyRegionsCount, err)
	}
	remote := peer.Regions()
	t.Logf("opened the node in %v: %d regions", time.Since(start), len(remote))
	if len(remote) != manyRegionsCount {
		t.Fatalf("the peer sees %d regions, want %d", len(remote), manyRegionsCount)
	}
	byID := map[connector.RegionID]connector.RemoteRegion{}
	for _, r := range remote {
		if r.Len != manyRegionsSize {
			t.Fatalf("region %d is %d bytes", r.ID, r.Len)
		}
		byID[r.ID] = r
	}
	// What an unmodified Mooncake Transfer Engine reads: every region is
	// a buffer with the node's name, an address and a length.
	body := mooncakeMetadata(t, session)
	var d connector.SegmentDescriptor
	if err := json.Unmarshal(body, &d); err != nil {
		t.Fatal(err)
	}
	named := 0
	for _, b := range d.Buffers {
		if b.Name == session && b.Addr != 0 && b.Length == manyRegionsSize {
			named++
		}
	}
	t.Logf("descriptor: %d bytes for %d buffers (%.1f bytes a buffer); max_handshake_frame default %d", len(body), len(d.Buffers), float64(len(body))/float64(len(d.Buffers)), config.DefaultMaxHandshakeFrame)
	if named != manyRegionsCount {
		t.Fatalf("%d of %d Mooncake buffers are complete", named, len(d.Buffers))
	}
	local := alloc(t, a, 2*manyRegionsSize)
	buf := local.Bytes()
	// The node wrote each region's id into its first 8 bytes: read a few
	// back by id and by absolute address.
	picks := []connector.RegionID{1, 2, 777, 50_000, 99_999, manyRegionsCount}
	for i, id := range picks {
		rr, ok := byID[id]
		if !ok {
			t.Fatalf("region %d is not in the descriptor", id)
		}
		clear(buf)
		if i%2 == 0 {
			err = a.Transfer(ctx, peer, connector.Op{Kind: connector.OpRead, LocalRegion: local.ID(), RemoteRegion: id, Length: manyRegionsSize})
		} else {
			err = a.TransferSyncRead(ctx, session, local.Addr(), rr.Addr, manyRegionsSize)
		}
		if err != nil {
			t.Fatalf("reading region %d: %v", id, err)
		}
		if got := binary.LittleEndian.Uint64(buf); got != uint64(id) {
			t.Fatalf("region %d holds %d", id, got)
		}
		// Write a pattern for the node to check: by id for odd picks,
		// by address for even ones.
		for j := range buf[:manyRegionsSize] {
			buf[j] = byte(uint64(id)*31 + uint64(j))
		}
		if i%2 == 1 {
			err = a.Transfer(ctx, peer, connector.Op{Kind: connector.OpWrite, LocalRegion: local.ID(), RemoteRegion: id, Length: manyRegionsSize})
		} else {
			err = a.TransferSyncWrite(ctx, session, local.Addr(), rr.Addr, manyRegionsSize)
		}
		if err != nil {
			t.Fatalf("writing region %d: %v", id, err)
		}
	}
	// An op across two neighbouring regions is refused: each is its own.
	if err := a.TransferSyncRead(ctx, session, local.Addr(), byID[2].Addr+manyRegionsSize/2, manyRegionsSize); err == nil {
		t.Fatal("a READ spanning two regions succeeded")
	}
	ids := make([]string, len(picks))
	for i, id := range picks {
		ids[i] = strconv.Itoa(int(id))
	}
	fmt.Fprintf(stdin, "check %s\n", strings.Join(ids, ","))
	if got := expect("checked "); got != "ok" {
		t.Fatalf("the node's check: %s", got)
	}
	stdin.Close()
	if got := expect("released "); got != "ok" {
		t.Fatalf("the node's release: %s", got)
	}
	if err := child.Wait(); err != nil {
		t.Fatalf("the node process: %v", err)
	}
}

// TestManyRegionsNode is the node of TestHundredThousandRegions, run in
// a child process; it does nothing otherwise.
func TestManyRegionsNode(t *testing.T) {
	dir := os.Getenv(manyRegionsEnv)
	if dir == "" {
		t.Skip("runs as the child of TestHundredThousandRegions")
	}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &syscall.Rlimit{Cur: manyRegionsLimit, Max: manyRegionsLimit}); err != nil {
		t.Fatal(err)
	}
	say := func(format string, args ...any) { fmt.Printf(format+"\n", args...) }
	ctx := context.Background()
	fds0 := fdlimit.OpenCount()
	c, err := connector.New(ctx, connector.Config{Protocol: "tcp", PluginDir: dir, Hostname: "127.0.0.1"}, connector.WithLogger(zap.NewNop()))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	pid := c.Status().PluginPID
	limits, _ := os.ReadFile(fmt.Sprintf("/proc/%d/limits", pid))
	for _, l := range strings.Split(string(limits), "\n") {
		if strings.HasPrefix(l, "Max open files") {
			say("plugin %s", strings.Join(strings.Fields(l), " "))
			if f := strings.Fields(l); len(f) < 5 || f[3] != strconv.Itoa(manyRegionsLimit) {
				t.Fatalf("the plugin's limit is not %d: %q", manyRegionsLimit, l)
			}
		}
	}
	self := os.Getpid()
	fdsUp, mapsUp := fdlimit.OpenCount(), fdlimit.MapCount()
	start := time.Now()
	// In bulk, as a serving stack registers its buffers: one round trip
	// to the plugin per 16,384 regions (AllocBatch), not one per region.
	sizes := make([]int, manyRegionsCount)
	for i := range sizes {
		sizes[i] = manyRegionsSize
	}
	regions, err := c.AllocBatch(ctx, sizes)
	if err != nil {
		t.Fatalf("AllocBatch of %d regions: %v", manyRegionsCount, err)
	}
	for _, r := range regions {
		binary.LittleEndian.PutUint64(r.Bytes(), uint64(r.ID()))
	}
	took := time.Since(start)
	say("registered %d regions of %d bytes in %v (%.0f/s); node: %d -> %d fds, %d -> %d mappings; %d memfds, mapped %d times here and %d times in the plugin, which holds %d",
		manyRegionsCount, manyRegionsSize, took, manyRegionsCount/took.Seconds(), fdsUp, fdlimit.OpenCount(), mapsUp, fdlimit.MapCount(),
		memfds(self), memfdMaps(self), memfdMaps(pid), memfds(pid))
	// 100,000 x 4 KiB is 391 MiB: 7 slabs of 64 MiB, each one descriptor
	// and one mapping per process.
	const slabs = (manyRegionsCount*manyRegionsSize + 64<<20 - 1) / (64 << 20)
	if memfds(self) != slabs || memfds(pid) != slabs || memfdMaps(self) != slabs || memfdMaps(pid) != slabs {
		t.Fatalf("descriptors or mappings grew with the regions: want %d of each", slabs)
	}
	say("session=%s", c.SessionID())

	in := bufio.NewScanner(os.Stdin)
	if !in.Scan() {
		t.Fatal("the test went away")
	}
	list, _ := strings.CutPrefix(in.Text(), "check ")
	for _, s := range strings.Split(list, ",") {
		id, _ := strconv.Atoi(s)
		mem := regions[id-1].Bytes()
		for j := range mem {
			if mem[j] != byte(uint64(id)*31+uint64(j)) {
				say("checked region %d byte %d is 0x%02x", id, j, mem[j])
				t.Fatalf("region %d was not written", id)
			}
		}
	}
	say("checked ok")
	io.Copy(io.Discard, os.Stdin) // the peer is done
	// Freeing every region of the first slab closes it on both sides.
	perSlab := (64 << 20) / manyRegionsSize
	start = time.Now()
	for _, r := range regions[:perSlab] {
		if err := r.Free(ctx); err != nil {
			t.Fatal(err)
		}
	}
	say("freed %d regions in %v; %d memfds, mapped %d times here and %d times in the plugin, which holds %d",
		perSlab, time.Since(start), memfds(self), memfdMaps(self), memfdMaps(pid), memfds(pid))
	if memfds(self) != slabs-1 || memfds(pid) != slabs-1 || memfdMaps(self) != slabs-1 || memfdMaps(pid) != slabs-1 {
		say("released leaked")
		t.Fatal("the first slab is still open after its last region was freed")
	}
	// Close releases the rest.
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if got := fdlimit.OpenCount(); got > fds0 {
		t.Errorf("%d descriptors open after Close, %d before New", got, fds0)
	}
	if memfds(self) != 0 || memfdMaps(self) != 0 {
		say("released leaked")
		t.Fatalf("%d memfds and %d of their mappings left after Close", memfds(self), memfdMaps(self))
	}
	say("released ok")
}

// memfds counts the memfds of kvconnect's slabs process pid holds open.
func memfds(pid int) int {
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return -1
	}
	n := 0
	for _, e := range ents {
		if l, err := os.Readlink(dir + "/" + e.Name()); err == nil && strings.HasPrefix(l, "/memfd:kvconnect:slab-") {
			n++
		}
	}
	return n
}

// memfdMaps counts the mappings of kvconnect's slabs in process pid.
func memfdMaps(pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		return -1
	}
	return strings.Count(string(b), "/memfd:kvconnect:slab-")
}

// mooncakeMetadata asks session for its descriptor as a Mooncake peer
// does (a Metadata frame without kvconnect's mark).
func mooncakeMetadata(t *testing.T, session string) []byte {
	t.Helper()
	nc, err := net.Dial("tcp", session)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	req := []byte("{}")
	frame := make([]byte, 9+len(req))
	binary.LittleEndian.PutUint64(frame, uint64(1+len(req)))
	frame[8] = 1
	copy(frame[9:], req)
	if _, err := nc.Write(frame); err != nil {
		t.Fatal(err)
	}
	var hdr [9]byte
	if _, err := io.ReadFull(nc, hdr[:]); err != nil {
		t.Fatal(err)
	}
	if hdr[8] != 1 {
		t.Fatalf("reply of type %d", hdr[8])
	}
	body := make([]byte, binary.LittleEndian.Uint64(hdr[:])-1)
	if _, err := io.ReadFull(nc, body); err != nil {
		t.Fatal(err)
	}
	return body
}

// TestRestartSendsEveryFileAgain: a restarted plugin gets each slab once
// more and every region in it, and peers reach them through it.
func TestRestartSendsEveryFileAgain(t *testing.T) {
	ctx := context.Background()
	a, b := newNode(t), newNode(t)
	const n = 300
	regions := make([]*connector.Region, n)
	for i := range regions {
		regions[i] = alloc(t, b, 4096)
		binary.LittleEndian.PutUint64(regions[i].Bytes(), uint64(1000+i))
	}
	pid := b.Status().PluginPID
	if got := memfds(pid); got != 1 {
		t.Fatalf("the plugin holds %d memfds for %d small regions, want 1", got, n)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	testbin.Eventually(t, "the plugin to be restarted", func() bool {
		st := b.Status()
		return st.Healthy && st.Transports[0].Restarts == 1 && st.PluginPID != pid
	})
	pid = b.Status().PluginPID
	if got, maps := memfds(pid), memfdMaps(pid); got != 1 || maps != 1 {
		t.Fatalf("the restarted plugin holds %d memfds and %d mappings of them, want 1 and 1", got, maps)
	}
	local := alloc(t, a, 4096)
	for _, i := range []int{0, 150, n - 1} {
		if err := a.TransferSyncRead(ctx, b.SessionID(), local.Addr(), regions[i].Addr(), 4096); err != nil {
			t.Fatalf("reading region %d after the restart: %v", i, err)
		}
		if got := binary.LittleEndian.Uint64(local.Bytes()); got != uint64(1000+i) {
			t.Fatalf("region %d holds %d after the restart", i, got)
		}
	}
}

// TestIdleNodeSleeps: after batches through the tcp plugin's ring, the
// plugins of an idle node pair wait without spinning or polling: each
// one's ring sleeper is blocked in futex(FUTEX_WAIT) on its SQ tail with
// no timeout, until the next batch wakes it (the host's side is
// plugins/host's TestRingIdleSleeps). A state, not a CPU share: what
// idling costs is BenchmarkIdleNode's report.
func TestIdleNodeSleeps(t *testing.T) {
	ctx := context.Background()
	a, b, peer, write := idlePair(t, 500)
	for _, n := range []*connector.Connector{a, b} {
		pid := n.Status().PluginPID
		testbin.Eventually(t, fmt.Sprintf("plugin %d to sleep on its ring's futex with no timeout", pid), func() bool {
			return testbin.SleepsOnFutex(t, pid, "kvconnect:ring", uint64(ring.SQTail))
		})
	}
	if err := a.Transfer(ctx, peer, write); err != nil {
		t.Fatalf("a batch after the idle time: %v", err)
	}
}

// idlePair is two nodes (tcp plugins) after batches batches from a to b
// through the ring; it returns a's peer b and the write it sent.
func idlePair(tb testing.TB, batches int) (a, b *connector.Connector, peer *connector.Peer, write connector.Op) {
	ctx := context.Background()
	a, b = newNode(tb), newNode(tb)
	src, dst := alloc(tb, a, 4096), alloc(tb, b, 4096)
	peer, err := a.Open(ctx, b.SessionID())
	if err != nil {
		tb.Fatal(err)
	}
	write = connector.Op{Kind: connector.OpWrite, LocalRegion: src.ID(), RemoteRegion: dst.ID(), Length: 4096}
	for i := 0; i < batches; i++ {
		if err := a.Transfer(ctx, peer, write); err != nil {
			tb.Fatal(err)
		}
	}
	if dp := a.Status().Transports[0].DataPath; dp != "ring" {
		tb.Fatalf("data path %q, want ring", dp)
	}
	return a, b, peer, write
}

// BenchmarkIdleNode reports the CPU an idle node pair (this process and
// both tcp plugins) uses after 5000 batches through the ring, as a share
// of a core, over b.N idle 10 ms periods (docs/DATAPATH.md):
//
//	go test -run '^$' -bench BenchmarkIdleNode -benchtime 1000x ./connector
func BenchmarkIdleNode(b *testing.B) {
	x, y, _, _ := idlePair(b, 5000)
	time.Sleep(100 * time.Millisecond) // let spinners time out
	pids := map[string]int{"host": os.Getpid(), "plugin-a": x.Status().PluginPID, "plugin-b": y.Status().PluginPID}
	before := map[string]time.Duration{}
	for name, pid := range pids {
		before[name] = testbin.CPUTime(b, pid)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		time.Sleep(10 * time.Millisecond) // measuring idleness: nothing to wait for
	}
	b.StopTimer()
	for name, pid := range pids {
		b.ReportMetric(100*(testbin.CPUTime(b, pid)-before[name]).Seconds()/b.Elapsed().Seconds(), name+"-%core")
	}
}
