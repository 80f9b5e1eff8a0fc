// Command crashhost is a host that dies without closing its plugin: it
// launches the plugin at os.Args[1], prints "ready" and waits to be
// killed. The socket directory tests kill it with SIGKILL.
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/kvconnect/kvconnect/plugins/host"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: crashhost <plugin binary>")
		os.Exit(2)
	}
	if _, err := host.Launch(context.Background(), host.LaunchConfig{Name: "fake", Path: os.Args[1]}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println("ready")
	select {}
}
