package plugins_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/kvconnect/kvconnect/plugins"
	"github.com/kvconnect/kvconnect/plugins/regions"
)

// A transport's options are its config subtree, transports.<name>, as
// JSON. DecodeOptions fills a struct and names the key of every mistake.
func ExampleDecodeOptions() {
	type options struct {
		Lanes int    `json:"lanes"`
		Mode  string `json:"mode"`
	}
	opts := options{Lanes: 4}
	err := plugins.DecodeOptions("mine", []byte(`{"lanse": 8}`), &opts)
	fmt.Println(err)
	fmt.Println(errors.Is(err, plugins.ErrInvalidArgument))
	// Output:
	// mine: unknown option transports.mine.lanse (did you mean "lanes"?); known options: lanes, mode: invalid argument
	// true
}

// A transport returns an *InitError when it cannot start on this host: the
// step, the native code, the cause and hints. Wrapping ErrUnavailable
// makes the host fall back to the next transport of its chain.
func ExampleInitError() {
	err := &plugins.InitError{
		Transport: "mine", Step: plugins.StepOpenDevice, NativeCode: 19, NativeName: "ENODEV",
		Cause: "no device named mine0", Hints: []string{"check the device name"},
		Err: plugins.ErrUnavailable,
	}
	fmt.Println(err)
	fmt.Println(errors.Is(err, plugins.ErrUnavailable))
	// Output:
	// mine: open device failed (ENODEV 19): no device named mine0
	// true
}

// miniTransport shows the duties of a transport: the lifecycle guard and
// the owner's bounds check, through the region table.
type miniTransport struct {
	guard   plugins.Guard
	regions regions.Table
}

func (t *miniTransport) Init(ctx context.Context, req plugins.InitRequest) (plugins.InitResult, error) {
	if err := t.guard.BeginInit("mini"); err != nil {
		return plugins.InitResult{}, err
	}
	// ... parse req.Options, bind a listener ...
	if err := t.guard.EndInit("mini", true); err != nil {
		return plugins.InitResult{}, err // Close came during Init
	}
	return plugins.InitResult{Endpoint: []byte("127.0.0.1:9"), Summary: "mini"}, nil
}

func (t *miniTransport) RegisterRegion(ctx context.Context, r plugins.Region) ([]byte, error) {
	if err := t.guard.Up("mini"); err != nil {
		return nil, err
	}
	return nil, t.regions.Add(uint64(r.ID), r.Addr, r.Mem)
}

// serve is what the transport runs for a peer's WRITE of n bytes at
// offset of region id: resolve and bounds-check before touching memory.
func (t *miniTransport) serve(id, offset, n uint64, payload []byte) error {
	e, mem, err := t.regions.Resolve(id, offset, n)
	if err != nil {
		return err // ErrUnknownRegion or ErrOutOfBounds: nothing touched
	}
	defer e.Release()
	copy(mem, payload)
	return nil
}

// The Guard gives the errors the Transport contract asks for, and the
// region table does the owner's bounds check.
func ExampleGuard() {
	t := &miniTransport{}
	_, err := t.RegisterRegion(context.Background(), plugins.Region{ID: 1})
	fmt.Println(errors.Is(err, plugins.ErrNotInitialized))

	t.Init(context.Background(), plugins.InitRequest{})
	_, err = t.Init(context.Background(), plugins.InitRequest{})
	fmt.Println(errors.Is(err, plugins.ErrInvalidArgument))

	mem := make([]byte, 1024)
	t.RegisterRegion(context.Background(), plugins.Region{ID: 1, Addr: 0x10000, Mem: mem})
	fmt.Println(t.serve(1, 1000, 24, make([]byte, 24)))
	fmt.Println(errors.Is(t.serve(1, 1000, 25, make([]byte, 25)), plugins.ErrOutOfBounds))
	fmt.Println(errors.Is(t.serve(2, 0, 1, []byte{1}), plugins.ErrUnknownRegion))
	// Output:
	// true
	// true
	// <nil>
	// true
	// true
}

// A plugin's main serves its transport; the host starts the binary
// (kvconnect-transport-<name>, found in plugin_dir) and speaks to it over
// gRPC. Serve returns when the host closes the plugin.
func ExampleServe() {
	var t plugins.Transport // your transport, e.g. mytransport.New()
	if t != nil {
		plugins.Serve(t)
	}
}
