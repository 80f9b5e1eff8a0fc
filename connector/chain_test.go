package connector_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/kvconnect/kvconnect/connector"
	"github.com/kvconnect/kvconnect/plugins"
	"github.com/kvconnect/kvconnect/plugins/transporttest"
)

func TestChainOrder(t *testing.T) {
	tests := []struct {
		cfg  connector.Config
		want string
	}{
		{connector.Config{Protocol: "rdma"}, "rdma,tcp"},
		{connector.Config{Protocol: "tcp"}, "tcp"},
		{connector.Config{}, "tcp"},
		{connector.Config{Protocol: "efa"}, "efa,tcp"},
		{connector.Config{Protocol: "thirdparty"}, "thirdparty,tcp"},
		{connector.Config{Protocol: "rdma", Fallback: []string{}}, "rdma"},
		{connector.Config{Protocol: "rdma", Fallback: []string{"ucx", "tcp", "ucx", "rdma"}}, "rdma,ucx,tcp"},
	}
	for _, tt := range tests {
		if got := strings.Join(connector.Chain(tt.cfg), ","); got != tt.want {
			t.Errorf("Chain(%+v) = %s, want %s", tt.cfg, got, tt.want)
		}
	}
}

// TestFallbackToTCP asks for a transport whose plugin is not installed:
// the node comes up on tcp, logs one warn line with the diagnosis, and
// Status carries both attempts.
func TestFallbackToTCP(t *testing.T) {
	core, logs := observer.New(zapcore.WarnLevel)
	cfg := connector.Config{Protocol: "nosuch", PluginDir: pluginDir(t)}
	c, err := connector.New(context.Background(), cfg, connector.WithLogger(zap.New(core)))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	st := c.Status()
	if st.Transport != "tcp" || !st.Fallback || len(st.Attempts) != 2 {
		t.Fatalf("status %+v: want tcp after a fallback, two attempts", st)
	}
	a := st.Attempts[0]
	if a.Transport != "nosuch" || a.OK || a.Diagnosis == nil || a.Duration <= 0 || !errors.Is(a.Err, connector.ErrPluginNotFound) {
		t.Fatalf("first attempt %+v (err %v): want the nosuch plugin not found, with a duration", a, a.Err)
	}
	if !st.Attempts[1].OK || st.Attempts[1].Transport != "tcp" {
		t.Fatalf("second attempt %+v: want tcp ok", st.Attempts[1])
	}
	failed := logs.FilterMessageSnippet("failed to initialise").All()
	if len(failed) != 1 {
		t.Fatalf("%d warn lines about the failed attempt, want exactly 1: %v", len(failed), logs.All())
	}
	f := failed[0].ContextMap()
	if f["transport"] != "nosuch" || f["fallback"] != "tcp" || f["cause"] == nil || f["step"] == nil {
		t.Fatalf("warn line fields %v: want transport, step, cause and the fallback", f)
	}
	if logs.FilterMessageSnippet("running on a fallback transport").Len() != 1 {
		t.Fatalf("no warn line saying the node runs on a fallback: %v", logs.All())
	}
}

func TestStrictModeFailsWithDiagnosis(t *testing.T) {
	cfg := connector.Config{Protocol: "nosuch", Fallback: []string{}, PluginDir: pluginDir(t)}
	_, err := connector.New(context.Background(), cfg)
	var ce *connector.ChainError
	if !errors.As(err, &ce) || !ce.Strict || len(ce.Attempts) != 1 {
		t.Fatalf("got %v, want a strict *ChainError with one attempt", err)
	}
	if !errors.Is(err, connector.ErrPluginNotFound) {
		t.Fatalf("chain error %v does not unwrap to the attempt's sentinel", err)
	}
	if !strings.Contains(err.Error(), "fallback is disabled") || !strings.Contains(err.Error(), "kvconnect-transport-nosuch") {
		t.Fatalf("error text %q: want the strict-mode explanation and the diagnosis", err)
	}
}

func TestWholeChainFailsListsEveryAttempt(t *testing.T) {
	cfg := connector.Config{Protocol: "nosuch", Fallback: []string{"alsomissing"}, PluginDir: pluginDir(t)}
	_, err := connector.New(context.Background(), cfg)
	var ce *connector.ChainError
	if !errors.As(err, &ce) || len(ce.Attempts) != 2 || ce.Strict {
		t.Fatalf("got %v, want a *ChainError with two attempts", err)
	}
	for _, name := range []string{"nosuch", "alsomissing"} {
		if !strings.Contains(err.Error(), "- "+name+":") {
			t.Errorf("error does not list the %s attempt:\n%v", name, err)
		}
	}
}

// TestConfigErrorStopsTheChain: a bad transport option is a mistake to
// fix, not a reason to run on another transport.
func TestConfigErrorStopsTheChain(t *testing.T) {
	cfg := connector.Config{Protocol: "tcp", Fallback: []string{"nosuch"}, PluginDir: pluginDir(t),
		Transports: map[string]map[string]any{"tcp": {"connections": 0}}}
	_, err := connector.New(context.Background(), cfg)
	var ce *connector.ChainError
	if !errors.As(err, &ce) || len(ce.Attempts) != 1 || !errors.Is(err, connector.ErrInvalidArgument) {
		t.Fatalf("got %v, want the chain to stop after the tcp config error", err)
	}
	if !strings.Contains(err.Error(), "transports.tcp.connections") {
		t.Fatalf("error %q does not name the bad option", err)
	}
	if !strings.Contains(err.Error(), "chain stopped at tcp") || !strings.Contains(err.Error(), "not tried: nosuch") || len(ce.Untried) != 1 {
		t.Fatalf("error %q (untried %v): want it to say the chain stopped at tcp, nosuch not tried", err, ce.Untried)
	}
	var ie *plugins.InitError
	if !errors.As(err, &ie) || ie.Transport != "tcp" || ie.Step != plugins.StepConfigure {
		t.Fatalf("diagnosis %+v: want tcp at step %q", ie, plugins.StepConfigure)
	}
}

// TestMixedPeers: one node asked for a transport it cannot run and fell
// back to tcp, the other was configured for tcp; they exchange data.
func TestMixedPeers(t *testing.T) {
	ctx := context.Background()
	fell, err := connector.New(ctx, connector.Config{Protocol: "nosuch", PluginDir: pluginDir(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer fell.Close()
	plain := newNode(t)
	src, dst := alloc(t, fell, 1<<20), alloc(t, plain, 1<<20)
	transporttest.Fill(src.Bytes(), 5)
	if err := fell.TransferSyncWrite(ctx, plain.SessionID(), src.Addr(), dst.Addr(), 1<<20); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(src.Bytes(), dst.Bytes()) {
		t.Fatal("data differs")
	}
	peer, err := plain.Open(ctx, fell.SessionID())
	if err != nil || peer.Transport() != "tcp" {
		t.Fatalf("Open from the tcp node: %v, transport %v", err, peer)
	}
}

// TestRDMAFallsBackWithItsDiagnosis runs the real rdma plugin: this host
// has no RDMA (ibv_get_device_list fails with ENOSYS, or libibverbs is
// missing), so the node ends up on tcp, and the warn line and Status carry
// the rdma preflight's diagnosis.
func TestRDMAFallsBackWithItsDiagnosis(t *testing.T) {
	core, logs := observer.New(zapcore.WarnLevel)
	c, err := connector.New(context.Background(), connector.Config{Protocol: "rdma", PluginDir: pluginDir(t)},
		connector.WithLogger(zap.New(core)))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	st := c.Status()
	if st.Transport != "tcp" || !st.Fallback || len(st.Attempts) != 2 {
		t.Fatalf("status %+v: want tcp after rdma failed", st)
	}
	a := st.Attempts[0]
	var ie *plugins.InitError
	if a.Transport != "rdma" || !errors.Is(a.Err, connector.ErrUnavailable) || !errors.As(a.Err, &ie) {
		t.Fatalf("rdma attempt %+v: want an unavailable *InitError", a)
	}
	if ie.Transport != "rdma" || ie.Cause == "" || len(ie.Hints) == 0 || a.Diagnosis.Step == "" {
		t.Fatalf("rdma diagnosis %+v: want step, cause and hints", ie)
	}
	t.Logf("rdma diagnosis here: step %q, %s %d: %s", ie.Step, ie.NativeName, ie.NativeCode, ie.Cause)
	lines := logs.FilterField(zap.String("transport", "rdma")).All()
	if len(lines) != 1 || lines[0].ContextMap()["cause"] != ie.Cause || lines[0].ContextMap()["step"] != ie.Step {
		t.Fatalf("want one warn line carrying the rdma diagnosis, got %v", lines)
	}
	if ie.NativeName != "" && lines[0].ContextMap()["native_name"] != ie.NativeName {
		t.Fatalf("warn line lacks native_name %s: %v", ie.NativeName, lines[0].ContextMap())
	}
}

func TestRDMAStrictFailsWithItsDiagnosis(t *testing.T) {
	_, err := connector.New(context.Background(), connector.Config{Protocol: "rdma", Fallback: []string{}, PluginDir: pluginDir(t)})
	var ie *plugins.InitError
	if !errors.Is(err, connector.ErrUnavailable) || !errors.As(err, &ie) || ie.Transport != "rdma" {
		t.Fatalf("strict rdma on a host without RDMA: %v, want the rdma diagnosis", err)
	}
	if !strings.Contains(err.Error(), "fallback is disabled") || !strings.Contains(err.Error(), "hint:") {
		t.Fatalf("error %q lacks the strict-mode note or the hints", err)
	}
}

// TestMixedPeersRDMAAndTCP: a node configured for rdma (which falls back
// here) and a node configured for tcp exchange data both ways.
func TestMixedPeersRDMAAndTCP(t *testing.T) {
	ctx := context.Background()
	r, err := connector.New(ctx, connector.Config{Protocol: "rdma", PluginDir: pluginDir(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	plain := newNode(t)
	a, b := alloc(t, r, 1<<20), alloc(t, plain, 1<<20)
	transporttest.Fill(a.Bytes(), 7)
	if err := r.TransferSyncWrite(ctx, plain.SessionID(), a.Addr(), b.Addr(), 1<<20); err != nil {
		t.Fatal(err)
	}
	transporttest.Fill(b.Bytes()[:4096], 8)
	if err := plain.TransferSyncWrite(ctx, r.SessionID(), b.Addr(), a.Addr()+4096, 4096); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a.Bytes()[4096:8192], b.Bytes()[:4096]) || !bytes.Equal(a.Bytes()[8192:], b.Bytes()[8192:]) {
		t.Fatal("data differs")
	}
}

// TestForcedTCPShowsInStatus: MC_FORCE_TCP=1 over a configured rdma
// leaves a note in Status, not only a startup warning.
func TestForcedTCPShowsInStatus(t *testing.T) {
	cfg, err := connector.LoadConfig(connector.LoadOptions{
		Base:    &connector.Config{Protocol: "rdma", PluginDir: pluginDir(t)},
		Environ: []string{"MC_FORCE_TCP=1"},
	})
	if err != nil {
		t.Fatal(err)
	}
	c, err := connector.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	st := c.Status()
	found := false
	for _, n := range st.Notes {
		found = found || (strings.Contains(n, "MC_FORCE_TCP=1") && strings.Contains(n, "rdma"))
	}
	if st.Transport != "tcp" || !found {
		t.Fatalf("Status after MC_FORCE_TCP=1: transport %s, notes %q", st.Transport, st.Notes)
	}
}
