// Command othersdk is a kvconnect transport plugin built with an SDK whose
// handshake cookie differs from the host's, as a plugin built against an
// incompatible kvconnect version would be.
package main

import "github.com/kvconnect/kvconnect/plugins"

// transport is never called: Serve refuses the host's cookie first.
type transport struct{ plugins.Transport }

func main() {
	plugins.Handshake.MagicCookieValue = "7f1c0a52-kvconnect-transport-v0"
	plugins.Serve(transport{})
}
