// Command othersdk behaves as a kvconnect transport plugin built with an
// SDK whose handshake cookie differs from the host's, as a plugin built
// against an incompatible kvconnect version would: it refuses the host's
// cookie the way plugins.Serve does.
package main

import (
	"fmt"
	"os"

	"github.com/kvconnect/kvconnect/internal/pluginrpc"
)

// otherCookie is the cookie value of the other SDK.
const otherCookie = "7f1c0a52-kvconnect-transport-v0"

func main() {
	if v := os.Getenv(pluginrpc.CookieKey); v != otherCookie {
		fmt.Fprintf(os.Stderr, "kvconnect transport plugin: the host's plugin SDK is incompatible with this plugin's: it sent handshake cookie %s=%q, this plugin expects %q\n",
			pluginrpc.CookieKey, v, otherCookie)
		os.Exit(pluginrpc.ExitCookieMismatch)
	}
	select {}
}
