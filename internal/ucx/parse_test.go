package ucx

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/kvconnect/kvconnect/errdefs"
)

// Output of ucp_context_print_info from UCX 1.13.1 with UCX_TLS=sm.
const contextInfo = `#
# UCP context
#
#     component 0  :  self
#     component 1  :  tcp
#     component 2  :  sysv
#     component 3  :  posix
#     component 4  :  ib
#     component 5  :  rdmacm
#     component 6  :  cma
#
#            md 0  :  component 2  sysv 
#            md 1  :  component 3  posix 
#            md 2  :  component 6  cma 
#            md 3  :  component 4  mlx5_0 
#
#      resource 0  :  md 0  dev 0  flags -- sysv/memory
#      resource 1  :  md 1  dev 0  flags -- posix/memory
#      resource 2  :  md 2  dev 0  flags -- cma/memory
#      resource 3  :  md 3  dev 1  flags -- rc_mlx5/mlx5_0:1
#
`

// Output of ucp_ep_print_info from UCX 1.13.1 (tcp lanes).
const epInfo = `#
# UCP endpoint 
#
#               peer: <no debug data>
#                 lane[0]:  1:tcp/lo.0 md[0]                -> md[0]/tcp/sysdev[255] rma_bw#0 am am_bw#0
#                 lane[1]:  0:tcp/eth0.0 md[0]              -> md[0]/tcp/sysdev[255] rma_bw#1 wireup
#
#                tag_send: 0..<egr/short>..8185..<egr/zcopy>..8192..<rndv>..(inf)
#
#                  rma_bw: mds [0] rndv_rkey_size 10
#
`

func TestParseContextInfo(t *testing.T) {
	got := ParseContextInfo(contextInfo)
	want := []Resource{
		{MD: "sysv", Transport: "sysv", Device: "memory"},
		{MD: "posix", Transport: "posix", Device: "memory"},
		{MD: "cma", Transport: "cma", Device: "memory"},
		{MD: "mlx5_0", Transport: "rc_mlx5", Device: "mlx5_0:1"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v\nwant %+v", got, want)
	}
	if !got[0].IsSharedMemory() || got[0].IsRDMA() || !got[3].IsRDMA() || got[3].IsSharedMemory() {
		t.Fatalf("classification wrong: %+v", got)
	}
	if r := ParseContextInfo("garbage\n# resource x\n"); len(r) != 0 {
		t.Fatalf("garbage parsed as %v", r)
	}
}

func TestParseEndpointInfo(t *testing.T) {
	got := ParseEndpointInfo(epInfo)
	want := []Lane{
		{Index: 0, Transport: "tcp", Device: "lo", Uses: []string{"rma_bw#0", "am", "am_bw#0"}},
		{Index: 1, Transport: "tcp", Device: "eth0", Uses: []string{"rma_bw#1", "wireup"}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v\nwant %+v", got, want)
	}
}

func TestStatusErrors(t *testing.T) {
	for _, c := range []struct {
		s    Status
		want error
	}{
		{ErrUnreachable, errdefs.ErrPeerUnreachable},
		{ErrConnectionReset, errdefs.ErrPeerUnreachable},
		{ErrEndpointTimeout, errdefs.ErrPeerUnreachable},
		{Status(-45), errdefs.ErrPeerUnreachable}, // a link failure
		{ErrTimedOut, errdefs.ErrTimeout},
		{ErrCanceled, errdefs.ErrCanceled},
		{ErrInvalidParam, errdefs.ErrInvalidArgument},
		{ErrUnsupported, errdefs.ErrNotSupported},
		{ErrNoDevice, errdefs.ErrUnavailable},
		{ErrNoMemory, errdefs.ErrInternal},
	} {
		err := c.s.Error("ucp_put_nbx")
		if !errors.Is(err, c.want) {
			t.Errorf("%s: %v does not wrap %v", c.s.Name(), err, c.want)
		}
		if !strings.Contains(err.Error(), c.s.Name()) || !strings.Contains(err.Error(), "ucp_put_nbx") {
			t.Errorf("%s: the error text must carry the call and the native status: %v", c.s.Name(), err)
		}
	}
	if OK.Error("x") != nil || InProgress.Error("x") != nil {
		t.Fatal("OK and InProgress are not errors")
	}
	if n := Status(-85).Name(); n != "UCS_ERR_ENDPOINT_FAILURE(-85)" {
		t.Fatalf("name of -85: %s", n)
	}
}

func TestLoadErrorWrapsUnavailable(t *testing.T) {
	err := error(&LoadError{Library: Library, Detail: "libucp.so.0: cannot open shared object file: No such file or directory", Hints: loadHints()})
	if !errors.Is(err, errdefs.ErrUnavailable) || !strings.Contains(err.Error(), Library) {
		t.Fatalf("%v", err)
	}
	if !strings.Contains(strings.Join(loadHints(), " "), "apt-get install "+DebianPackage) {
		t.Fatal("hints must name the Debian package")
	}
}
