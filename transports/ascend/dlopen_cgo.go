//go:build linux && cgo

package ascend

/*
#cgo LDFLAGS: -ldl
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

// kvc_dlprobe opens path with dlopen, looks up sym, writes the file the
// symbol comes from into where and dlerror's text into err. It returns 0 on
// success, 1 when dlopen failed, 2 when dlsym failed. dlopen, dlsym and
// dlerror run in one C call so dlerror reads the state of the same thread.
static int kvc_dlprobe(const char *path, const char *sym, char *where, size_t wlen, char *err, size_t elen) {
	dlerror();
	void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (h == NULL) {
		const char *e = dlerror();
		snprintf(err, elen, "%s", e != NULL ? e : "dlopen failed without a dlerror message");
		return 1;
	}
	dlerror();
	void *s = dlsym(h, sym);
	const char *e = dlerror();
	if (e != NULL || s == NULL) {
		snprintf(err, elen, "%s", e != NULL ? e : "symbol resolves to NULL");
		dlclose(h);
		return 2;
	}
	Dl_info info;
	if (dladdr(s, &info) != 0 && info.dli_fname != NULL) {
		snprintf(where, wlen, "%s", info.dli_fname);
	}
	dlclose(h);
	return 0;
}
*/
import "C"

import (
	"bytes"
	"unsafe"
)

// cgoLoader reports whether this build can dlopen libraries.
const cgoLoader = true

// dlopenLoader opens path (a file path, or a bare name the system loader
// resolves) with dlopen(RTLD_NOW|RTLD_LOCAL), checks that it exports
// symbol, and closes it again. It returns the file the symbol was found in.
// Failures are *loadError quoting dlerror.
func dlopenLoader(path, symbol string) (string, error) {
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	csym := C.CString(symbol)
	defer C.free(unsafe.Pointer(csym))
	var where, msg [4096]byte
	rc := C.kvc_dlprobe(cpath, csym,
		(*C.char)(unsafe.Pointer(&where[0])), C.size_t(len(where)),
		(*C.char)(unsafe.Pointer(&msg[0])), C.size_t(len(msg)))
	cstr := func(b []byte) string {
		if i := bytes.IndexByte(b, 0); i >= 0 {
			b = b[:i]
		}
		return string(b)
	}
	switch rc {
	case 0:
		resolved := cstr(where[:])
		if resolved == "" {
			resolved = path
		}
		return resolved, nil
	case 1:
		return "", &loadError{Call: "dlopen", Msg: cstr(msg[:])}
	default:
		return "", &loadError{Call: "dlsym", Msg: cstr(msg[:])}
	}
}
