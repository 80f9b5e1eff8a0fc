// Command fakeplugin is a transport plugin for the plugins package's
// tests. FAKEPLUGIN_INIT selects what Init does: "ok" (log a line with
// fields and succeed), "panic" (log, then crash), "fail" (return an
// *InitError). Connect fails with the sentinel whose wire kind is the
// peer's name; RegisterRegion answers the first bytes of the region as the
// plugin mapped it. Transfer to peer 98 ends the process mid-batch; to
// peer 99 it waits for its context, then fails with the context's error.
// FAKEPLUGIN_CLOSE=exit makes Close end the process before it answers.
// FAKEPLUGIN_INFO=hang makes Info never answer. FAKEPLUGIN_REGISTER=slow
// makes RegisterRegion take 300 ms whatever its deadline, and refuse an
// id it holds.
// FAKEPLUGIN_CHILD=file starts a long sleep that inherits the plugin's
// stdout and stderr (as a helper or a shell wrapper's background job
// would) and writes its pid to file.
package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/kvconnect/kvconnect/errdefs"
	"github.com/kvconnect/kvconnect/plugins"
)

type fake struct{}

func (fake) Info(context.Context) (plugins.Info, error) {
	if os.Getenv("FAKEPLUGIN_INFO") == "hang" {
		select {} // wedged: answers nothing, whatever the caller's deadline
	}
	return plugins.Info{Name: "fake", Version: "test", APIVersion: plugins.APIVersion}, nil
}

func (fake) Init(_ context.Context, req plugins.InitRequest) (plugins.InitResult, error) {
	req.Logger.Info("probing devices", zap.String("device", "mlx5_0"), zap.Int("port", 1))
	switch mode := os.Getenv("FAKEPLUGIN_INIT"); mode {
	case "panic":
		panic("fake transport: init failed on purpose")
	case "fail":
		return plugins.InitResult{}, &plugins.InitError{
			Transport: "fake", Step: plugins.StepProbeDevices, NativeCode: 19, NativeName: "ENODEV",
			Cause: "no RDMA device is present", Hints: []string{"install an RDMA NIC", "or use tcp"},
			Err: fmt.Errorf("fake: %w", plugins.ErrUnavailable),
		}
	case "", "ok":
		return plugins.InitResult{Endpoint: []byte("fake-endpoint"), Summary: "fake"}, nil
	default:
		return plugins.InitResult{}, fmt.Errorf("fake: FAKEPLUGIN_INIT=%q: %w", mode, plugins.ErrInvalidArgument)
	}
}

func (fake) Close(context.Context) error {
	if os.Getenv("FAKEPLUGIN_CLOSE") == "exit" {
		os.Exit(4)
	}
	return nil
}

// registered are the regions of FAKEPLUGIN_REGISTER=slow mode.
var (
	regMu      sync.Mutex
	registered = map[plugins.RegionID]bool{}
)

func (fake) RegisterRegion(_ context.Context, r plugins.Region) ([]byte, error) {
	if os.Getenv("FAKEPLUGIN_REGISTER") == "slow" {
		// A registration that takes its time and ignores the caller's
		// deadline (a transport need not watch it), then keeps the id.
		time.Sleep(300 * time.Millisecond)
		regMu.Lock()
		defer regMu.Unlock()
		if registered[r.ID] {
			return nil, fmt.Errorf("fake: region %d already registered: %w", r.ID, plugins.ErrInvalidArgument)
		}
		registered[r.ID] = true
	}
	return append([]byte(nil), r.Mem[:min(len(r.Mem), 16)]...), nil
}

func (fake) DeregisterRegion(_ context.Context, id plugins.RegionID) error {
	regMu.Lock()
	delete(registered, id)
	regMu.Unlock()
	return nil
}

func (fake) Connect(_ context.Context, peer plugins.PeerInfo) (plugins.PeerID, error) {
	if s := errdefs.FromKind(peer.Name); s != nil {
		return 0, fmt.Errorf("fake: connect %s: %w", peer.Name, s)
	}
	return 1, nil
}

func (fake) Disconnect(context.Context, plugins.PeerID) error { return nil }

func (fake) Transfer(ctx context.Context, peer plugins.PeerID, ops []plugins.Op, results []plugins.OpResult) error {
	switch peer {
	case 98:
		os.Exit(3)
	case 99:
		<-ctx.Done()
		err := fmt.Errorf("fake: %w", plugins.ContextError(ctx.Err()))
		plugins.FillResults(results, err)
		return err
	}
	plugins.FillResults(results, nil)
	return nil
}

func main() {
	if f := os.Getenv("FAKEPLUGIN_CHILD"); f != "" {
		cmd := exec.Command("sleep", "3600")
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
		if err := cmd.Start(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		if err := os.WriteFile(f, []byte(strconv.Itoa(cmd.Process.Pid)), 0o600); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
	plugins.Serve(fake{})
}
