package connector_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kvconnect/kvconnect/connector"
	"github.com/kvconnect/kvconnect/internal/testbin"
)

// ucxSMNode starts a node whose preferred transport is ucx on
// shared-memory lanes only (so it reaches only this host), with tcp kept
// up beside it.
func ucxSMNode(t *testing.T) *connector.Connector {
	t.Helper()
	dir := pluginDir(t)
	if _, err := testbin.Build("./cmd/kvconnect-transport-ucx", "kvconnect-transport-ucx"); err != nil {
		t.Fatal(err)
	}
	cfg := connector.Config{Protocol: "ucx", PluginDir: dir,
		Transports: map[string]map[string]any{"ucx": {"tls": "sm"}}}
	c, err := connector.New(context.Background(), cfg)
	if err != nil {
		t.Fatalf("ucx on shared-memory lanes: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	st := c.Status()
	if len(st.Transports) != 2 || st.Transports[0].Name != "ucx" || st.Transports[1].Name != "tcp" {
		t.Fatalf("transports %+v, want ucx then tcp", st.Transports)
	}
	return c
}

// TestSameHostPeerUsesSharedMemory: two nodes on this host with ucx on
// shared-memory lanes meet on ucx.
func TestSameHostPeerUsesSharedMemory(t *testing.T) {
	a, b := ucxSMNode(t), ucxSMNode(t)
	src, dst := alloc(t, a, 1<<20), alloc(t, b, 1<<20)
	peer, err := a.Open(context.Background(), b.SessionID())
	if err != nil {
		t.Fatal(err)
	}
	if peer.Transport() != "ucx" {
		t.Fatalf("same-host peer reached over %s, want ucx", peer.Transport())
	}
	if err := a.TransferSyncWrite(context.Background(), b.SessionID(), src.Addr(), dst.Addr(), 1<<20); err != nil {
		t.Fatal(err)
	}
}

// TestOtherHostPeerSkipsSameHostOnlyTransport: a peer in another IPC
// namespace (as another host would be) has ucx up too, but shared-memory
// lanes cannot reach it: the node picks tcp.
func TestOtherHostPeerSkipsSameHostOnlyTransport(t *testing.T) {
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Skip("needs unshare(1) (util-linux) to start a peer in its own IPC namespace")
	}
	if out, err := exec.Command("unshare", "--ipc", "true").CombinedOutput(); err != nil {
		t.Skipf("cannot create an IPC namespace here (unshare --ipc needs CAP_SYS_ADMIN): %v %s", err, out)
	}
	a := ucxSMNode(t)
	cli, err := testbin.Build("./cmd/kvconnect", "kvconnect")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("unshare", "--ipc", cli, "serve", "--alloc", "1MiB", "--protocol", "ucx",
		"--plugin-dir", filepath.Dir(cli), "--log-level", "warn")
	cmd.Env = append(os.Environ(), "KVCONNECT_TRANSPORTS__UCX__TLS=sm")
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cmd.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
		}
	}()
	var st struct {
		Session    string `json:"session"`
		Transports []struct{ Name string }
	}
	sc := bufio.NewScanner(out)
	if !sc.Scan() {
		t.Fatalf("the peer printed no status (exit: %v)", cmd.Wait())
	}
	if err := json.Unmarshal(sc.Bytes(), &st); err != nil {
		t.Fatalf("peer status %q: %v", sc.Text(), err)
	}
	if len(st.Transports) < 2 || st.Transports[0].Name != "ucx" {
		t.Fatalf("peer transports %+v, want ucx first", st.Transports)
	}
	peer, err := a.Open(context.Background(), st.Session)
	if err != nil {
		t.Fatal(err)
	}
	if peer.Transport() != "tcp" {
		t.Fatalf("peer in another IPC namespace reached over %s, want tcp (shared memory cannot reach it)", peer.Transport())
	}
	src := alloc(t, a, 1<<20)
	if err := a.TransferSyncWrite(context.Background(), st.Session, src.Addr(), peer.Regions()[0].Addr, 1<<20); err != nil {
		t.Fatal(err)
	}
}

// TestStrictNodesWithNothingInCommon: a strict ucx node (which runs no tcp
// beside ucx) and a tcp node cannot meet; Open says what each side has.
func TestStrictNodesWithNothingInCommon(t *testing.T) {
	dir := pluginDir(t)
	if _, err := testbin.Build("./cmd/kvconnect-transport-ucx", "kvconnect-transport-ucx"); err != nil {
		t.Fatal(err)
	}
	strict, err := connector.New(context.Background(), connector.Config{Protocol: "ucx", Fallback: []string{}, PluginDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer strict.Close()
	other := newNode(t)
	_, err = strict.Open(context.Background(), other.SessionID())
	if !errors.Is(err, connector.ErrNoCommonTransport) {
		t.Fatalf("Open: %v, want ErrNoCommonTransport", err)
	}
	for _, want := range []string{"has transports [tcp] up", "this node has [ucx]"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
}
