//go:build linux && cgo

package rdma

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// No verbs headers: the plugin must build and start where libibverbs-dev
// and libibverbs are absent. struct ibv_device stays opaque.
typedef void **(*kvc_get_device_list_fn)(int *);
typedef void (*kvc_free_device_list_fn)(void **);
typedef const char *(*kvc_get_device_name_fn)(void *);

typedef struct {
	int loaded;
	int listed;
	int list_errno;
	int num;
	int truncated;
	char err[512];
	char names[65536];
} kvc_ibv_probe;

static void kvc_probe_ibverbs(const char *soname, kvc_ibv_probe *out) {
	memset(out, 0, sizeof(*out));
	dlerror();
	// Never dlclose: providers loaded by libibverbs stay referenced.
	void *h = dlopen(soname, RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		const char *e = dlerror();
		snprintf(out->err, sizeof(out->err), "%s", e ? e : "dlopen failed");
		return;
	}
	kvc_get_device_list_fn get_list = (kvc_get_device_list_fn)dlsym(h, "ibv_get_device_list");
	kvc_free_device_list_fn free_list = (kvc_free_device_list_fn)dlsym(h, "ibv_free_device_list");
	kvc_get_device_name_fn get_name = (kvc_get_device_name_fn)dlsym(h, "ibv_get_device_name");
	if (!get_list || !free_list || !get_name) {
		snprintf(out->err, sizeof(out->err), "%s was loaded but lacks ibv_get_device_list, ibv_free_device_list or ibv_get_device_name", soname);
		return;
	}
	out->loaded = 1;
	int n = 0;
	errno = 0;
	void **list = get_list(&n);
	if (!list) {
		out->list_errno = errno;
		return;
	}
	out->listed = 1;
	out->num = n;
	size_t off = 0;
	for (int i = 0; i < n && list[i]; i++) {
		const char *name = get_name(list[i]);
		if (!name) {
			continue;
		}
		size_t l = strlen(name);
		if (off + l + 2 > sizeof(out->names)) {
			out->truncated = 1;
			break;
		}
		memcpy(out->names + off, name, l);
		off += l;
		out->names[off++] = '\n';
	}
	out->names[off] = 0;
	free_list(list);
}
*/
import "C"

import (
	"strings"
	"syscall"
	"unsafe"
)

func loadLibrary(soname string) Library {
	cs := C.CString(soname)
	defer C.free(unsafe.Pointer(cs))
	var out C.kvc_ibv_probe
	C.kvc_probe_ibverbs(cs, &out)
	lib := Library{Soname: soname}
	if out.loaded == 0 {
		lib.LoadError = C.GoString(&out.err[0])
		return lib
	}
	lib.Loaded = true
	if out.listed == 0 {
		lib.ListErrno = syscall.Errno(out.list_errno)
		return lib
	}
	lib.Listed = true
	lib.Truncated = out.truncated != 0
	for _, name := range strings.Split(C.GoString(&out.names[0]), "\n") {
		if name != "" {
			lib.Devices = append(lib.Devices, name)
		}
	}
	return lib
}
