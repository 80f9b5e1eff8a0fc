// Command kvconnect-transport-simpletcp is the simpletcp transport as a
// kvconnect plugin: put it in a node's plugin_dir and start the node with
// --protocol simpletcp.
package main

import (
	"github.com/kvconnect/kvconnect/examples/transport-plugin/simpletcp"
	"github.com/kvconnect/kvconnect/plugins"
)

func main() { plugins.Serve(simpletcp.New()) }
