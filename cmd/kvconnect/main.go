// Command kvconnect runs and inspects kvconnect nodes: serve runs a node,
// doctor probes transports and the host, config shows and checks the
// effective configuration, metadata-server serves Mooncake's HTTP metadata
// protocol, version prints versions.
package main

import (
	"errors"
	"fmt"
	"os"
)

func main() {
	if err := newRootCommand().Execute(); err != nil {
		var ee exitError
		if errors.As(err, &ee) {
			os.Exit(ee.code)
		}
		fmt.Fprintln(os.Stderr, "kvconnect:", err)
		os.Exit(1)
	}
}
