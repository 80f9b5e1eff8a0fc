// Command libkvconnect is kvconnect's C library: built with
// -buildmode=c-shared into libkvconnect.so, with the API in
// include/kvconnect.h (docs/C-API.md). The public functions are the C
// functions of kvconnect.c; they call the kvcgo_* functions below, which
// turn handles into engines and errors into return codes plus the calling
// thread's last error. The Python package kvconnect loads it with ctypes.
package main

/*
#include <stdint.h>
#include <stdlib.h>
#include "shim.h"

extern char **environ;

static char *environ_at(size_t i) { return environ ? environ[i] : NULL; }
*/
import "C"

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"unsafe"

	"github.com/kvconnect/kvconnect/connector"
	"github.com/kvconnect/kvconnect/internal/version"
	"github.com/kvconnect/kvconnect/plugins"
)

// fail records err as the calling thread's last error and returns its
// code. It runs on the caller's thread (the cgo call's goroutine is
// locked to it), so the C thread-local is the caller's.
func fail(err error) C.int {
	setError(err)
	return C.int(codeOf(err))
}

func setError(err error) {
	text, js := C.CString(err.Error()), C.CString(errorJSON(err))
	C.kvc__set_error(text, js)
	C.free(unsafe.Pointer(text))
	C.free(unsafe.Pointer(js))
}

// syncForkTable publishes forkEntries to the C half. Callers hold the
// fork lock (kvconnect.c takes it around the calls that change memory).
func syncForkTable() {
	entries := forkEntries()
	if len(entries) == 0 {
		C.kvc__fork_table_set(nil, 0)
		return
	}
	table := (*[1 << 20]C.kvc__fork_entry)(C.malloc(C.size_t(len(entries)) * C.size_t(unsafe.Sizeof(C.kvc__fork_entry{}))))[:len(entries):len(entries)]
	for i, e := range entries {
		table[i] = C.kvc__fork_entry{start: C.uint64_t(e.start), end: C.uint64_t(e.end), fd: C.int(e.fd), offset: C.uint64_t(e.offset)}
	}
	C.kvc__fork_table_set(&table[0], C.size_t(len(entries)))
	C.free(unsafe.Pointer(&table[0]))
}

func goString(s *C.char) string {
	if s == nil {
		return ""
	}
	return C.GoString(s)
}

// maxList bounds the length of an array a caller passes (buffers to
// register or unregister, ops are bounded by MaxBatchOps): beyond it the
// count is garbage (a negative number through size_t), and viewing it
// would panic, ending the caller's process.
const maxList = 1 << 26

// u64s views a C array of n uint64 values (nil for n == 0; n at most
// maxList, which its callers check).
func u64s(p *C.uint64_t, n C.size_t) []uint64 {
	if p == nil || n == 0 || n > maxList {
		return nil
	}
	return unsafe.Slice((*uint64)(unsafe.Pointer(p)), int(n))
}

// cString is a C copy of s for the caller to kvc_free.
func cString(s string) *C.char { return C.CString(s) }

var versionString = C.CString(version.Version)

//export kvcgo_version
func kvcgo_version() *C.char { return versionString }

func init() { C.kvc__set_version(versionString) }

//export kvcgo_engine_new
func kvcgo_engine_new() C.uint64_t { return C.uint64_t(newHandle()) }

//export kvcgo_engine_set_defaults
func kvcgo_engine_set_defaults(h C.uint64_t, js *C.char) C.int {
	e, err := lookup(uint64(h))
	if err != nil {
		return fail(err)
	}
	if err := e.setDefaults(goString(js)); err != nil {
		return fail(err)
	}
	return 0
}

//export kvcgo_engine_initialize
func kvcgo_engine_initialize(h C.uint64_t, host, meta, proto, dev *C.char) C.int {
	return kvcgo_engine_initialize_ext(h, host, meta, proto, dev, nil)
}

//export kvcgo_engine_initialize_ext
func kvcgo_engine_initialize_ext(h C.uint64_t, host, meta, proto, dev, metaType *C.char) C.int {
	e, err := lookup(uint64(h))
	if err != nil {
		return fail(err)
	}
	if err := e.initialize(goString(host), goString(meta), goString(proto), goString(dev), goString(metaType)); err != nil {
		return fail(err)
	}
	return 0
}

//export kvcgo_engine_close
func kvcgo_engine_close(h C.uint64_t) C.int {
	e, err := lookup(uint64(h))
	if errors.Is(err, connector.ErrClosed) {
		return 0 // closed already: idempotent
	}
	if err != nil {
		return fail(err)
	}
	err = e.close()
	dropHandle(uint64(h))
	syncForkTable()
	if err != nil {
		return fail(err)
	}
	return 0
}

//export kvcgo_engine_rpc_port
func kvcgo_engine_rpc_port(h C.uint64_t) C.int {
	e, err := lookup(uint64(h))
	if err != nil {
		return fail(err)
	}
	st, _, err := e.status()
	if err != nil {
		return fail(err)
	}
	port, err := rpcPort(st)
	if err != nil {
		return fail(err)
	}
	return C.int(port)
}

//export kvcgo_engine_session_id
func kvcgo_engine_session_id(h C.uint64_t) *C.char {
	e, err := lookup(uint64(h))
	if err != nil {
		setError(err)
		return nil
	}
	c, err := e.node()
	if err != nil {
		setError(err)
		return nil
	}
	return cString(c.SessionID())
}

//export kvcgo_engine_status_json
func kvcgo_engine_status_json(h C.uint64_t) *C.char {
	e, err := lookup(uint64(h))
	if err != nil {
		setError(err)
		return nil
	}
	st, warnings, err := e.status()
	if err != nil {
		setError(err)
		return nil
	}
	b, err := json.Marshal(engineStatus{Status: st, ConfigWarnings: warnings, Library: currentLibraryStatus()})
	if err != nil {
		setError(err)
		return nil
	}
	return cString(string(b))
}

// engineStatus is kvc_engine_status_json's object: the node's status,
// and the library's.
type engineStatus struct {
	connector.Status
	// ConfigWarnings are the configuration's warnings (a secret file
	// others can read, an unknown key): the library logs at error level
	// by default, so the caller shows them (the Python package logs them).
	ConfigWarnings []string      `json:"config_warnings,omitempty"`
	Library        libraryStatus `json:"library"`
}

//export kvcgo_register_memory_batch
func kvcgo_register_memory_batch(h C.uint64_t, addrs, lens *C.uint64_t, n C.size_t) C.int {
	e, err := lookup(uint64(h))
	if err != nil {
		return fail(err)
	}
	if n == 0 || n > maxList || addrs == nil || lens == nil {
		return fail(codeErr(codeInvalidArgument, fmt.Errorf("kvconnect: register memory: %d buffers: want between 1 and %d, each with its address and length: %w", uint64(n), maxList, connector.ErrInvalidArgument)))
	}
	err = e.register(u64s(addrs, n), u64s(lens, n))
	syncForkTable()
	if err != nil {
		return fail(err)
	}
	return 0
}

//export kvcgo_unregister_memory_batch
func kvcgo_unregister_memory_batch(h C.uint64_t, addrs *C.uint64_t, n C.size_t) C.int {
	e, err := lookup(uint64(h))
	if err != nil {
		return fail(err)
	}
	if n == 0 || n > maxList || addrs == nil {
		return fail(codeErr(codeInvalidArgument, fmt.Errorf("kvconnect: unregister memory: %d addresses: want between 1 and %d: %w", uint64(n), maxList, connector.ErrInvalidArgument)))
	}
	err = e.unregister(u64s(addrs, n))
	syncForkTable()
	if err != nil {
		return fail(err)
	}
	return 0
}

//export kvcgo_allocate_managed
func kvcgo_allocate_managed(h C.uint64_t, n C.uint64_t) C.uint64_t {
	e, err := lookup(uint64(h))
	if err != nil {
		setError(err)
		return 0
	}
	addr, err := e.allocate(uint64(n))
	syncForkTable()
	if err != nil {
		setError(err)
		return 0
	}
	return C.uint64_t(addr)
}

//export kvcgo_free_managed
func kvcgo_free_managed(h C.uint64_t, addr C.uint64_t) C.int {
	e, err := lookup(uint64(h))
	if err != nil {
		return fail(err)
	}
	err = e.freeManaged(uint64(addr))
	syncForkTable()
	if err != nil {
		return fail(err)
	}
	return 0
}

//export kvcgo_open_segment
func kvcgo_open_segment(h C.uint64_t, session *C.char, ms C.int64_t) C.int {
	e, err := lookup(uint64(h))
	if err != nil {
		return fail(err)
	}
	if _, err := e.open(goString(session), int64(ms)); err != nil {
		return fail(err)
	}
	return 0
}

//export kvcgo_segment_first_buffer
func kvcgo_segment_first_buffer(h C.uint64_t, session *C.char, ms C.int64_t) C.uint64_t {
	e, err := lookup(uint64(h))
	if err != nil {
		setError(err)
		return 0
	}
	addr, err := e.firstBuffer(goString(session), int64(ms))
	if err != nil {
		setError(err)
		return 0
	}
	return C.uint64_t(addr)
}

//export kvcgo_probe
func kvcgo_probe(h C.uint64_t, session *C.char, ms C.int64_t) C.int {
	e, err := lookup(uint64(h))
	if err != nil {
		return fail(err)
	}
	if err := e.probe(goString(session), int64(ms)); err != nil {
		return fail(err)
	}
	return 0
}

//export kvcgo_notify
func kvcgo_notify(h C.uint64_t, session, name, msg *C.char, ms C.int64_t) C.int {
	e, err := lookup(uint64(h))
	if err != nil {
		return fail(err)
	}
	if err := e.notify(goString(session), goString(name), goString(msg), int64(ms)); err != nil {
		return fail(err)
	}
	return 0
}

//export kvcgo_get_notifies
func kvcgo_get_notifies(h C.uint64_t) *C.char {
	e, err := lookup(uint64(h))
	if err != nil {
		setError(err)
		return nil
	}
	ns, err := e.notifies()
	if err != nil {
		setError(err)
		return nil
	}
	b, _ := json.Marshal(ns)
	return cString(string(b))
}

// ops views the arrays of a transfer call, refusing bad ones.
func ops(op C.int, local, remote, lens *C.uint64_t, n C.size_t) ([]uint64, []uint64, []uint64, error) {
	if op != 0 && op != 1 {
		return nil, nil, nil, codeErr(codeInvalidArgument, fmt.Errorf("kvconnect: op %d: want KVC_OP_READ (0) or KVC_OP_WRITE (1): %w", op, connector.ErrInvalidArgument))
	}
	if n == 0 || local == nil || remote == nil || lens == nil {
		return nil, nil, nil, codeErr(codeInvalidArgument, fmt.Errorf("kvconnect: a transfer of %d ops: want at least one op with its local address, remote address and length: %w", n, connector.ErrInvalidArgument))
	}
	if int(n) > plugins.MaxBatchOps {
		return nil, nil, nil, codeErr(codeTooManyRequests, fmt.Errorf("kvconnect: a batch of %d ops: the limit is %d: split it: %w", n, plugins.MaxBatchOps, connector.ErrInvalidArgument))
	}
	return u64s(local, n), u64s(remote, n), u64s(lens, n), nil
}

//export kvcgo_transfer_sync
func kvcgo_transfer_sync(h C.uint64_t, session *C.char, op C.int, local, remote, lens *C.uint64_t, n C.size_t, ms C.int64_t) C.int {
	e, err := lookup(uint64(h))
	if err != nil {
		return fail(err)
	}
	l, r, ln, err := ops(op, local, remote, lens, n)
	if err != nil {
		return fail(err)
	}
	if err := e.transferSync(goString(session), int(op), l, r, ln, int64(ms)); err != nil {
		return fail(err)
	}
	return 0
}

//export kvcgo_batch_submit
func kvcgo_batch_submit(h C.uint64_t, session *C.char, op C.int, local, remote, lens *C.uint64_t, n C.size_t, ms C.int64_t) C.uint64_t {
	e, err := lookup(uint64(h))
	if err != nil {
		setError(err)
		return 0
	}
	l, r, ln, err := ops(op, local, remote, lens, n)
	if err != nil {
		setError(err)
		return 0
	}
	id, err := e.submit(goString(session), int(op), l, r, ln, int64(ms))
	if err != nil {
		setError(err)
		return 0
	}
	return C.uint64_t(id)
}

//export kvcgo_batch_wait
func kvcgo_batch_wait(h C.uint64_t, id C.uint64_t, ms C.int64_t, statuses *C.int32_t, n C.size_t) C.int {
	e, err := lookup(uint64(h))
	if err != nil {
		return waitFailed(err)
	}
	var sts []int32
	if statuses != nil && n > 0 && n <= maxList {
		sts = unsafe.Slice((*int32)(unsafe.Pointer(statuses)), int(n))
	}
	outcome, ended, err := e.wait(uint64(id), int64(ms), sts)
	if err != nil {
		if !ended {
			return waitFailed(err) // the batch could not be looked at
		}
		setError(err) // why it failed
	}
	return C.int(outcome)
}

// waitFailed is kvc_batch_wait's code for a batch it could not look at:
// one below -1000, which no outcome (KVC_BATCH_FAILED is -1,
// KVC_BATCH_TIMEDOUT -2) can be mistaken for. An engine handle never
// given out (KVC_ERR_INVALID_ARGUMENT elsewhere) names no batch:
// KVC_ERR_UNKNOWN_BATCH.
func waitFailed(err error) C.int {
	setError(err)
	if code := codeOf(err); code <= -1000 {
		return C.int(code)
	}
	return C.int(codeUnknownBatch)
}

//export kvcgo_batch_free
func kvcgo_batch_free(h C.uint64_t, id C.uint64_t) C.int {
	e, err := lookup(uint64(h))
	if err != nil {
		return fail(err)
	}
	if err := e.free(uint64(id)); err != nil {
		return fail(err)
	}
	return 0
}

//export kvcgo_engine_topology
func kvcgo_engine_topology(h C.uint64_t, dev *C.char) *C.char {
	e, err := lookup(uint64(h))
	if err != nil {
		setError(err)
		return nil
	}
	e.mu.Lock()
	defaults := e.defaults
	e.mu.Unlock()
	js, err := topology(defaults, goString(dev))
	if err != nil {
		setError(err)
		return nil
	}
	return cString(js)
}

// envMu makes kvcgo_sync_environ's update of Go's environment one step
// for environSnapshot.
var envMu sync.Mutex

// environSnapshot is Go's copy of the environment, never half way through
// a kvcgo_sync_environ.
func environSnapshot() []string {
	envMu.Lock()
	defer envMu.Unlock()
	return os.Environ()
}

// kvcgo_sync_environ makes Go's copy of the environment (read when the
// library loaded) equal to the process's environment now: variables a
// program set or removed since then apply to what starts next.
//
//export kvcgo_sync_environ
func kvcgo_sync_environ() C.int {
	envMu.Lock()
	defer envMu.Unlock()
	now := map[string]string{}
	for i := C.size_t(0); ; i++ {
		p := C.environ_at(i)
		if p == nil {
			break
		}
		if k, v, ok := strings.Cut(C.GoString(p), "="); ok && k != "" {
			now[k] = v
		}
	}
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); k != "" {
			if _, ok := now[k]; !ok {
				os.Unsetenv(k)
			}
		}
	}
	for k, v := range now {
		if cur, ok := os.LookupEnv(k); !ok || cur != v {
			os.Setenv(k, v)
		}
	}
	return 0
}
