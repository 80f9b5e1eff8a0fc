//go:build !linux || !cgo

package rdma

import (
	"fmt"
	"runtime"
)

// loadLibrary cannot load anything in this build: the rdma transport
// needs cgo on Linux to dlopen libibverbs.
func loadLibrary(soname string) Library {
	why := "this rdma plugin was built without cgo (CGO_ENABLED=0), so it cannot load " + soname
	if runtime.GOOS != "linux" {
		why = fmt.Sprintf("the rdma transport needs Linux; this build is for %s/%s", runtime.GOOS, runtime.GOARCH)
	}
	return Library{Soname: soname, Unsupported: why}
}
