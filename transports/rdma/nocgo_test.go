//go:build !linux || !cgo

package rdma

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/kvconnect/kvconnect/plugins"
)

// Without cgo the transport builds; when the preflight passes, bringing up
// the UCX data path is a diagnosis that drives the fallback chain.
func TestInitPreflightPassedWithoutCgo(t *testing.T) {
	tr := New()
	tr.loader, tr.memlock, tr.lookupEnv = listed("mlx5_0", "mlx5_1"), unlimited, noEnv
	defer tr.Close(context.Background())
	_, err := tr.Init(context.Background(), plugins.InitRequest{Options: initOptions(t, "ib-healthy", "")})
	var ie *plugins.InitError
	if !errors.As(err, &ie) || ie.Transport != "rdma" || ie.Step != plugins.StepLoadLibrary || !errors.Is(err, plugins.ErrUnavailable) ||
		!strings.Contains(ie.Cause, "without cgo") {
		t.Fatalf("Init = %v, want the UCX load-library diagnosis", err)
	}
}
