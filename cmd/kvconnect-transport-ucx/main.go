// Command kvconnect-transport-ucx is the ucx transport as a kvconnect
// plugin process. The kvconnect host starts it; it is not run by hand.
//
// UCX is loaded with dlopen when the transport initialises, so the binary
// starts on hosts without UCX and answers Init with a diagnosis naming
// libucp.so.0 and the package that ships it.
package main

import (
	"github.com/kvconnect/kvconnect/plugins"
	"github.com/kvconnect/kvconnect/transports/ucx"
)

func main() {
	plugins.Serve(ucx.New())
}
