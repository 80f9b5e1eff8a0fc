// Command kvconnect-transport-ascend is the ascend transport as a
// kvconnect plugin process. The kvconnect host starts it; it is not run by
// hand. It probes the host for Ascend NPUs and the CANN runtime and, having
// no NPU data path, always reports why it cannot run so the host falls
// back (see docs/ASCEND.md).
package main

import (
	"github.com/kvconnect/kvconnect/plugins"
	"github.com/kvconnect/kvconnect/transports/ascend"
)

func main() {
	plugins.Serve(ascend.New())
}
