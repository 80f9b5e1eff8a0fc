// Command kvconnect-transport-rdma is the rdma transport as a kvconnect
// plugin process. The kvconnect host starts it; it is not run by hand.
package main

import (
	"github.com/kvconnect/kvconnect/plugins"
	"github.com/kvconnect/kvconnect/transports/rdma"
)

func main() {
	plugins.Serve(rdma.New())
}
