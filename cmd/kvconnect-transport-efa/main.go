// Command kvconnect-transport-efa is the efa (libfabric) transport as a
// kvconnect plugin process. The kvconnect host starts it; it is not run by
// hand. libfabric is loaded when the transport initialises, so this
// binary starts on hosts without it and reports a diagnosis instead.
package main

import (
	"github.com/kvconnect/kvconnect/plugins"
	"github.com/kvconnect/kvconnect/transports/efa"
)

func main() {
	plugins.Serve(efa.New())
}
