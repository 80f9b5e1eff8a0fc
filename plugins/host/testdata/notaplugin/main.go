// Command notaplugin is some other program installed under a plugin's
// name: it prints its usage on stdout and exits.
package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Println("usage: notaplugin [-v] FILE...")
	fmt.Fprintln(os.Stderr, "notaplugin: no files given")
	os.Exit(2)
}
