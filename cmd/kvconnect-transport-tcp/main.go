// Command kvconnect-transport-tcp is the tcp transport as a kvconnect
// plugin process. The kvconnect host starts it; it is not run by hand.
package main

import (
	"github.com/kvconnect/kvconnect/plugins"
	"github.com/kvconnect/kvconnect/transports/tcp"
)

func main() {
	plugins.Serve(tcp.New())
}
