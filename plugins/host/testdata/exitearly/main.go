// Command exitearly is a plugin that gives up before the handshake, with
// an explanation on stderr.
package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Fprintln(os.Stderr, "exitearly: opening /dev/infiniband/uverbs0")
	fmt.Fprintln(os.Stderr, "exitearly: fatal: no such device; giving up")
	os.Exit(3)
}
