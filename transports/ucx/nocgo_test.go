//go:build !linux || !cgo

package ucx_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/kvconnect/kvconnect/plugins"
	"github.com/kvconnect/kvconnect/transports/ucx"
)

// Without cgo the transport still builds, and Init is a diagnosis that
// drives the fallback chain.
func TestInitWithoutCgo(t *testing.T) {
	_, err := ucx.New().Init(context.Background(), plugins.InitRequest{Hostname: "127.0.0.1"})
	var ie *plugins.InitError
	if !errors.As(err, &ie) || ie.Step != plugins.StepLoadLibrary || !errors.Is(err, plugins.ErrUnavailable) {
		t.Fatalf("got %v, want an InitError at %q wrapping ErrUnavailable", err, plugins.StepLoadLibrary)
	}
	if !strings.Contains(err.Error(), "without cgo") {
		t.Fatalf("the diagnosis should say the binary was built without cgo: %v", err)
	}
}
