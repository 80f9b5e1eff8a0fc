//go:build !linux || !cgo

package ascend

// cgoLoader reports whether this build can dlopen libraries.
const cgoLoader = false

// dlopenLoader cannot load anything in a build without cgo (or off
// Linux): it returns errNoCgo.
func dlopenLoader(path, symbol string) (string, error) {
	return "", errNoCgo
}
