//go:build !linux || !cgo

package efa

import (
	"context"
	"fmt"
	"runtime"

	"go.uber.org/zap"

	"github.com/kvconnect/kvconnect/plugins"
)

// fabric is absent from builds without cgo or off Linux: Init fails before
// any of its methods could be reached.
type fabric struct{}

type peerConn struct{}

func openFabric(opts Options, log *zap.Logger) (*fabric, plugins.InitResult, error) {
	return nil, plugins.InitResult{}, &plugins.InitError{
		Transport: Name,
		Step:      plugins.StepLoadLibrary,
		Cause:     fmt.Sprintf("this build of the efa transport has no libfabric support (built for %s/%s without cgo or off Linux)", runtime.GOOS, runtime.GOARCH),
		Hints: []string{
			"build kvconnect-transport-efa on Linux with CGO_ENABLED=1 and a C compiler (libfabric-dev provides the headers; libfabric itself is loaded at run time)",
			"or run without EFA: protocol tcp, or keep the fallback chain (the connector falls back to tcp)",
		},
		Err: fmt.Errorf("efa: built without libfabric support: %w", plugins.ErrUnavailable),
	}
}

func errNoFabric() error {
	return fmt.Errorf("efa: built without libfabric support: %w", plugins.ErrUnavailable)
}

func (f *fabric) registerMR(ctx context.Context, id uint64, mem []byte) ([]byte, error) {
	return nil, errNoFabric()
}

func (f *fabric) deregisterMR(ctx context.Context, id uint64) error { return errNoFabric() }

func (f *fabric) connect(ctx context.Context, name string, ep endpoint, p *peer) (*peerConn, error) {
	return nil, errNoFabric()
}

func (f *fabric) disconnect(ctx context.Context, conn *peerConn) error { return errNoFabric() }

func (f *fabric) localDesc(id uint64) (uintptr, error) { return 0, errNoFabric() }

func (f *fabric) newBatch(conn *peerConn, nops int) *batch { return newBatch(conn, nops, 1) }

func (f *fabric) run(ctx context.Context, b *batch, results []plugins.OpResult) error {
	err := errNoFabric()
	plugins.FillResults(results, err)
	return err
}

func (f *fabric) close(ctx context.Context) error { return nil }
