// Command kvconnect runs and inspects kvconnect nodes: serve runs a node,
// version prints versions.
package main

import (
	"fmt"
	"os"
)

func main() {
	if err := newRootCommand().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "kvconnect:", err)
		os.Exit(1)
	}
}
