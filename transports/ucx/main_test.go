package ucx_test

import (
	"os"
	"testing"

	"github.com/kvconnect/kvconnect/internal/testbin"
)

// helpers run instead of the tests when the test binary is started as a
// helper process; each returns false when it is not the one asked for.
var helpers []func() bool

func TestMain(m *testing.M) {
	for _, h := range helpers {
		if h() {
			os.Exit(0)
		}
	}
	testbin.Main(m)
}
