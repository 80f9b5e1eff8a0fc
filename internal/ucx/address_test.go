//go:build linux && cgo

package ucx

import (
	"errors"
	"testing"

	"github.com/kvconnect/kvconnect/errdefs"
)

// TestConnectToGarbledAddress: a worker address comes from a peer (its
// descriptor, a hello message), and ucp_ep_create reads it without a
// length. Truncated copies of a real address (padded with zeros by
// Connect, never read past its allocation) and an oversized one are
// refused or connect; none crashes the process.
func TestConnectToGarbledAddress(t *testing.T) {
	needUCX(t)
	p := newPair(t, "tcp")
	addr, err := p.b.Address()
	if err != nil {
		t.Fatal(err)
	}
	refused := 0
	for n := 1; n < len(addr); n++ {
		ep, err := p.a.Connect(addr[:n], false)
		if err != nil {
			refused++
			continue
		}
		if st := p.a.CloseEP(0, ep, false); st != OK && st != InProgress {
			t.Logf("close of the endpoint to a %d-byte prefix: %v", n, st.Error("close"))
		}
		p.progress()
	}
	t.Logf("%d of %d truncated addresses refused", refused, len(addr)-1)
	if _, err := p.a.Connect(make([]byte, MaxAddress+1), false); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("a %d-byte address: %v, want ErrInvalidArgument", MaxAddress+1, err)
	}
}
