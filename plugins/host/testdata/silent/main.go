// Command silent never answers the plugin handshake.
package main

import "time"

func main() { time.Sleep(time.Minute) }
