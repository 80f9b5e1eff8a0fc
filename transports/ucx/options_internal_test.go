package ucx

import (
	"fmt"
	"testing"
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
