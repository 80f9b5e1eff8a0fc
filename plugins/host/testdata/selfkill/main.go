// Command selfkill dies by SIGKILL before the plugin handshake, as a
// plugin the kernel's OOM killer picks would.
package main

import (
	"fmt"
	"os"
	"syscall"
)

func main() {
	fmt.Fprintln(os.Stderr, "selfkill: allocating device queues")
	syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {}
}
