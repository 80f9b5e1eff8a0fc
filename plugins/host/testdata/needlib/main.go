// Command needlib is linked against libkvtest.so.1 (built by the test from
// ../libkvtest): with the library gone, the dynamic loader refuses to
// start it. Build with CGO_LDFLAGS="-L<dir> -Wl,-rpath,<dir>".
package main

// #cgo LDFLAGS: -lkvtest
// int kvtest_answer(void);
import "C"

import "fmt"

func main() { fmt.Println(C.kvtest_answer()) }
