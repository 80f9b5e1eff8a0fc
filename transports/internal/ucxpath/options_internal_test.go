package ucxpath

import (
	"errors"
	"fmt"
	"testing"

	ucxlib "github.com/kvconnect/kvconnect/internal/ucx"
	"github.com/kvconnect/kvconnect/plugins"
)

// Each bulk default is applied only when the lane list can select a
// transport that reads it (UCX warns about variables nothing reads).
func TestBulkDefaultsFollowLanes(t *testing.T) {
	for tls, want := range map[string]string{
		"":          "[[MM_SEG_SIZE 32k] [RX_SEG_SIZE 128k] [TX_SEG_SIZE 64k]]",
		"all":       "[[MM_SEG_SIZE 32k] [RX_SEG_SIZE 128k] [TX_SEG_SIZE 64k]]",
		"^tcp":      "[[MM_SEG_SIZE 32k] [RX_SEG_SIZE 128k] [TX_SEG_SIZE 64k]]",
		"tcp":       "[[RX_SEG_SIZE 128k] [TX_SEG_SIZE 64k]]",
		"sm":        "[[MM_SEG_SIZE 32k]]",
		"posix,cma": "[[MM_SEG_SIZE 32k]]",
		"cma":       "[]",
		"rc,ud":     "[]",
	} {
		if got := fmt.Sprint(Options{}.ucxConfig(tls)); got != want {
			t.Errorf("tls=%q: %s, want %s", tls, got, want)
		}
	}
	o := Options{UCXConfig: map[string]string{"TX_SEG_SIZE": "16k", "RNDV_THRESH": "1k"}}
	if got := fmt.Sprint(o.ucxConfig("tcp")); got != "[[RNDV_THRESH 1k] [RX_SEG_SIZE 128k] [TX_SEG_SIZE 16k]]" {
		t.Errorf("ucx_config overrides: %s", got)
	}
}

func TestRequireRDMA(t *testing.T) {
	tcp := []ucxlib.Resource{{Transport: "tcp", Device: "eth0"}, {Transport: "cma", Device: "memory"}}
	if err := RequireRDMA(tcp); !errors.Is(err, plugins.ErrUnavailable) {
		t.Fatalf("tcp and cma lanes: %v, want ErrUnavailable", err)
	}
	if err := RequireRDMA(append(tcp, ucxlib.Resource{Transport: "rc_mlx5", Device: "mlx5_0:1"})); err != nil {
		t.Fatalf("with an rc_mlx5 lane: %v", err)
	}
	if err := RequireRDMA(nil); err == nil {
		t.Fatal("no lanes accepted")
	}
}
