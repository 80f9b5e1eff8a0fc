package connector_test

import (
	"context"
	"net"
	"os/exec"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/kvconnect/kvconnect/connector"
	"github.com/kvconnect/kvconnect/internal/testbin"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// TestHandshakeNotStarvedByIdleClients: 1000 connections that send
// nothing and 100 that drip one byte at a time do not keep a real peer
// from opening the node within 1 s.
func TestHandshakeNotStarvedByIdleClients(t *testing.T) {
	node := newNode(t)
	alloc(t, node, 1<<20)
	var conns []net.Conn
	defer func() {
		for _, nc := range conns {
			nc.Close()
		}
	}()
	for i := 0; i < 1000; i++ {
		nc, err := net.Dial("tcp", node.SessionID())
		if err != nil {
			t.Fatalf("idle connection %d: %v", i, err)
		}
		conns = append(conns, nc)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	defer func() { close(stop); wg.Wait() }()
	for i := 0; i < 100; i++ {
		nc, err := net.Dial("tcp", node.SessionID())
		if err != nil {
			t.Fatalf("slow connection %d: %v", i, err)
		}
		conns = append(conns, nc)
		wg.Add(1)
		go func() {
			defer wg.Done()
			frame := []byte{200, 0, 0, 0, 0, 0, 0, 0, 1} // announces 199 bytes of body
			tick := time.NewTicker(50 * time.Millisecond)
			defer tick.Stop()
			for _, b := range frame {
				select {
				case <-stop:
					return
				case <-tick.C:
				}
				if _, err := nc.Write([]byte{b}); err != nil {
					return
				}
			}
		}()
	}
	peer := newNode(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	start := time.Now()
	p, err := peer.Open(ctx, node.SessionID())
	if err != nil {
		t.Fatalf("a real peer could not open the node within 1 s beside 1100 idle and slow connections: %v", err)
	}
	t.Logf("opened in %v beside 1100 idle and slow connections", time.Since(start))
	if len(p.Regions()) != 1 {
		t.Fatalf("regions %+v", p.Regions())
	}
}

// TestDataListenerSurvivesEMFILE: when the tcp plugin runs out of file
// descriptors, its data port keeps accepting once descriptors are free
// again (it used to stop for good).
func TestDataListenerSurvivesEMFILE(t *testing.T) {
	if _, err := exec.LookPath("prlimit"); err != nil {
		t.Skip("prlimit (util-linux) is not installed")
	}
	ctx := context.Background()
	core, logs := observer.New(zapcore.InfoLevel)
	target, initiator := newNode(t, connector.WithLogger(zap.New(core))), newNode(t)
	dst := alloc(t, target, 1<<20)
	src := alloc(t, initiator, 1<<20)
	st := target.Status()
	pid := st.Transports[0].PluginPID
	ep := ""
	for _, tr := range st.Transports {
		if tr.Name == "tcp" {
			_, ep, _ = cutSummary(tr.Summary)
		}
	}
	// Lower the plugin's limit to what it uses now plus a few, then use
	// those up with connections it accepts.
	if out, err := exec.Command("prlimit", "--pid", strconv.Itoa(pid), "--nofile=64:").CombinedOutput(); err != nil {
		t.Skipf("prlimit --pid refused (no permission to change another process's limits here): %v %s", err, out)
	}
	var conns []net.Conn
	for i := 0; i < 120; i++ {
		nc, err := net.DialTimeout("tcp", ep, time.Second)
		if err != nil {
			break
		}
		conns = append(conns, nc)
	}
	// The plugin hits EMFILE: the last connections sit in its accept
	// queue unaccepted, and it says so (once per burst).
	deadline := time.Now().Add(testbin.WaitLimit)
	for logs.FilterMessageSnippet("accept failed on the data port").Len() == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the plugin never reported an accept failure with %d connections open under a limit of 64", len(conns))
		}
		time.Sleep(10 * time.Millisecond) // waiting for a log line the plugin forwards
	}
	// Free its descriptors again.
	for _, nc := range conns {
		nc.Close()
	}
	if out, err := exec.Command("prlimit", "--pid", strconv.Itoa(pid), "--nofile=4096:").CombinedOutput(); err != nil {
		t.Fatalf("restoring the limit: %v %s", err, out)
	}
	tctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if err := initiator.TransferSyncWrite(tctx, target.SessionID(), src.Addr(), dst.Addr(), 1<<20); err != nil {
		t.Fatalf("the data port did not come back after EMFILE: %v", err)
	}
	if n := logs.FilterMessageSnippet("accept failed on the data port").Len(); n > 3 {
		t.Errorf("%d accept-failure lines for one burst: not rate-limited", n)
	}
}

// cutSummary splits "tcp host:port" into its transport and endpoint.
func cutSummary(s string) (string, string, bool) {
	for i := range s {
		if s[i] == ' ' {
			return s[:i], s[i+1:], true
		}
	}
	return "", "", false
}
