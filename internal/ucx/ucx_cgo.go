//go:build linux && cgo

package ucx

/*
#cgo CFLAGS: -O2 -Wall
#cgo LDFLAGS: -ldl
#include <stdlib.h>
#include "shim.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"sync"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/kvconnect/kvconnect/errdefs"
)

var (
	loadOnce sync.Once
	loadErr  error
	version  [3]int
)

// Load opens libucp.so.0 once per process. It returns a *LoadError
// (wrapping errdefs.ErrUnavailable) when the library is missing, broken or
// too old.
func Load() error {
	loadOnce.Do(func() {
		name := C.CString(Library)
		defer C.free(unsafe.Pointer(name))
		var buf [512]C.char
		if rc := C.kvc_load(name, &buf[0], C.size_t(len(buf))); rc != 0 {
			loadErr = &LoadError{Library: Library, Detail: C.GoString(&buf[0]), Hints: loadHints()}
			return
		}
		var maj, min, rel C.uint
		C.kvc_version(&maj, &min, &rel)
		version = [3]int{int(maj), int(min), int(rel)}
		if version[0] != MinVersion[0] || version[1] < MinVersion[1] {
			loadErr = &LoadError{Library: Library,
				Detail: fmt.Sprintf("UCX %d.%d.%d is too old; kvconnect needs %d.%d or newer", version[0], version[1], version[2], MinVersion[0], MinVersion[1]),
				Hints:  []string{"upgrade UCX (Debian/Ubuntu: apt-get install " + DebianPackage + ")"}}
		}
	})
	return loadErr
}

// Version is the loaded library's version ("1.13.1"); "" before a
// successful Load.
func Version() string {
	if Load() != nil {
		return ""
	}
	return fmt.Sprintf("%d.%d.%d", version[0], version[1], version[2])
}

func statusText(s Status) string {
	if Load() != nil {
		return ""
	}
	return C.GoString(C.kvc_status_string(C.int(s)))
}

var resourcesMu sync.Mutex

// Available lists every transport/device pair UCX offers on this host
// (what `ucx_info -d` shows), from UCT's resource queries.
func Available() ([]Resource, error) {
	if err := Load(); err != nil {
		return nil, err
	}
	resourcesMu.Lock()
	defer resourcesMu.Unlock()
	buf := make([]C.kvc_resource, 64)
	for {
		var total C.int
		if st := Status(C.kvc_query_resources(&buf[0], C.int(len(buf)), &total)); st != OK {
			return nil, st.Error("uct_query_components")
		}
		if int(total) <= len(buf) {
			out := make([]Resource, int(total))
			for i := range out {
				r := &buf[i]
				out[i] = Resource{Component: C.GoString(&r.component[0]), MD: C.GoString(&r.md[0]),
					Transport: C.GoString(&r.tl[0]), Device: C.GoString(&r.dev[0]), DeviceType: DeviceType(r.dev_type)}
			}
			return out, nil
		}
		buf = make([]C.kvc_resource, int(total))
	}
}

// ConfigKeys returns the names (without the UCX_ prefix) of the loaded
// library's configuration variables: all of them, as `ucx_info -c` lists
// them (transports included), and the UCP-level ones, which
// ucp_config_modify applies under these names. Both are nil when the
// library does not say.
func ConfigKeys() (all, ucp map[string]bool) {
	if Load() != nil {
		return nil, nil
	}
	if _, err := Available(); err != nil { // loads the transport modules
		return nil, nil
	}
	resourcesMu.Lock()
	defer resourcesMu.Unlock()
	dump := func(p *C.char, n C.size_t) map[string]bool {
		if p == nil {
			return nil
		}
		defer C.free(unsafe.Pointer(p))
		return ParseConfigKeys(C.GoStringN(p, C.int(n)))
	}
	var n C.size_t
	all = dump(C.kvc_config_dump(&n), n)
	ucp = dump(C.kvc_ucp_config_dump(&n), n)
	if all == nil || ucp == nil {
		return nil, nil
	}
	return all, ucp
}

// The Go constants shared with the stub build must equal the C ones: each
// array below has a negative length, and the build fails, otherwise.
var (
	_ [C.KVC_PUT - OpPut]struct{}
	_ [OpPut - C.KVC_PUT]struct{}
	_ [C.KVC_GET - OpGet]struct{}
	_ [OpGet - C.KVC_GET]struct{}
	_ [C.KVC_FLUSH - OpFlush]struct{}
	_ [OpFlush - C.KVC_FLUSH]struct{}
	_ [C.KVC_MAX_MSG - MaxMessage]struct{}
	_ [MaxMessage - C.KVC_MAX_MSG]struct{}
)

var createSteps = map[C.int]string{
	C.KVC_STEP_CONFIG_READ:   "read config",
	C.KVC_STEP_CONFIG_TLS:    "set TLS",
	C.KVC_STEP_CONFIG_NETDEV: "set NET_DEVICES",
	C.KVC_STEP_CONFIG_EXTRA:  "set configuration",
	C.KVC_STEP_INIT:          "init context",
	C.KVC_STEP_WORKER:        "create worker",
	C.KVC_STEP_AM_HANDLER:    "set active message handler",
	C.KVC_STEP_EFD:           "get event fd",
}

// Worker is a UCP context with one worker, its event fd and a wake fd.
type Worker struct {
	c      *C.kvc_worker
	slots  int
	efd    int
	wakefd int
	epfd   int
	ops    []C.kvc_op
	cmpl   []C.kvc_cmpl
	errs   []C.kvc_eperr
	closed bool
}

// NewWorker creates a context and a worker with the RMA, AM and WAKEUP
// features.
func NewWorker(cfg Config) (*Worker, error) {
	if err := Load(); err != nil {
		return nil, err
	}
	if cfg.Slots <= 0 {
		return nil, fmt.Errorf("ucx: %d slots: %w", cfg.Slots, errdefs.ErrInvalidArgument)
	}
	cstr := func(s string) *C.char {
		if s == "" {
			return nil
		}
		return C.CString(s)
	}
	tls, nd := cstr(cfg.TLS), cstr(cfg.NetDevices)
	defer C.free(unsafe.Pointer(tls))
	defer C.free(unsafe.Pointer(nd))
	var kv **C.char
	if len(cfg.Extra) > 0 {
		kv = (**C.char)(C.calloc(C.size_t(2*len(cfg.Extra)), C.size_t(unsafe.Sizeof((*C.char)(nil)))))
		arr := unsafe.Slice(kv, 2*len(cfg.Extra))
		for i, e := range cfg.Extra {
			arr[2*i], arr[2*i+1] = C.CString(e[0]), C.CString(e[1])
		}
		defer func() {
			for _, p := range arr {
				C.free(unsafe.Pointer(p))
			}
			C.free(unsafe.Pointer(kv))
		}()
	}
	var c *C.kvc_worker
	var step C.int
	st := Status(C.kvc_worker_create(tls, nd, kv, C.int(len(cfg.Extra)), C.int(cfg.ThreadMode), C.uint32_t(cfg.Slots), &c, &step))
	if st != OK {
		cfgStep := step == C.KVC_STEP_CONFIG_TLS || step == C.KVC_STEP_CONFIG_NETDEV || step == C.KVC_STEP_CONFIG_EXTRA
		return nil, &CreateError{Step: createSteps[step], Status: st, Text: statusText(st), Config: cfgStep}
	}
	w := &Worker{c: c, slots: cfg.Slots, efd: -1, wakefd: -1, epfd: -1}
	var efd C.int
	if st := Status(C.kvc_worker_efd(c, &efd)); st != OK {
		w.Destroy()
		return nil, &CreateError{Step: createSteps[C.KVC_STEP_EFD], Status: st, Text: statusText(st)}
	}
	w.efd = int(efd) // owned by UCX
	var err error
	if w.wakefd, err = unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK); err != nil {
		w.Destroy()
		return nil, fmt.Errorf("ucx: eventfd: %w", err)
	}
	if w.epfd, err = unix.EpollCreate1(unix.EPOLL_CLOEXEC); err != nil {
		w.Destroy()
		return nil, fmt.Errorf("ucx: epoll_create1: %w", err)
	}
	for _, fd := range []int{w.efd, w.wakefd} {
		if err := unix.EpollCtl(w.epfd, unix.EPOLL_CTL_ADD, fd, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(fd)}); err != nil {
			w.Destroy()
			return nil, fmt.Errorf("ucx: epoll_ctl: %w", err)
		}
	}
	return w, nil
}

// Slots is the number of slots the worker was created with.
func (w *Worker) Slots() int { return w.slots }

// Destroy destroys the worker and the context; operations still in flight
// are released by UCX without completing. Idempotent.
func (w *Worker) Destroy() {
	if w.closed {
		return
	}
	w.closed = true
	if w.epfd >= 0 {
		unix.Close(w.epfd)
	}
	if w.wakefd >= 0 {
		unix.Close(w.wakefd)
	}
	C.kvc_worker_destroy(w.c)
	w.c = nil
}

// Abandon gives up the worker without destroying it: for when UCX still
// holds requests and ucp_worker_destroy would abort (UCX 1.13 asserts that
// an endpoint's requests were released). The worker and context stay
// allocated and are never progressed again; this package's own fds are
// closed.
func (w *Worker) Abandon() {
	if w.closed {
		return
	}
	w.closed = true
	unix.Close(w.epfd)
	unix.Close(w.wakefd)
	w.c = nil
}

// Address is the worker's packed address, what peers connect to.
func (w *Worker) Address() ([]byte, error) {
	var p unsafe.Pointer
	var n C.size_t
	if st := Status(C.kvc_worker_address(w.c, &p, &n)); st != OK {
		return nil, st.Error("ucp_worker_get_address")
	}
	defer C.kvc_worker_address_release(w.c, p)
	return C.GoBytes(p, C.int(n)), nil
}

// Resources are the transports/devices the context uses, parsed from
// ucp_context_print_info.
func (w *Worker) Resources() []Resource {
	var n C.size_t
	p := C.kvc_context_info(w.c, &n)
	if p == nil {
		return nil
	}
	defer C.free(unsafe.Pointer(p))
	return ParseContextInfo(C.GoStringN(p, C.int(n)))
}

// Lanes are the lanes UCX selected for ep, parsed from ucp_ep_print_info.
func (w *Worker) Lanes(ep EP) []Lane {
	var n C.size_t
	p := C.kvc_ep_info(C.uintptr_t(ep), &n)
	if p == nil {
		return nil
	}
	defer C.free(unsafe.Pointer(p))
	return ParseEndpointInfo(C.GoStringN(p, C.int(n)))
}

// Wake makes a Wait in progress (or the next one) return. It is the one
// method any goroutine may call.
func (w *Worker) Wake() {
	var one = [8]byte{1}
	unix.Write(w.wakefd, one[:]) // EAGAIN: already signalled
}

// Wait arms the worker and sleeps until UCX has events, Wake is called, or
// timeout passes (negative: no timeout). It returns at once, with busy
// set, when UCX says it has unprocessed events; call Progress after it
// either way.
func (w *Worker) Wait(timeout time.Duration) (busy bool, err error) {
	switch st := Status(C.kvc_worker_arm(w.c)); st {
	case OK:
	case ErrBusy:
		return true, nil
	default:
		return false, st.Error("ucp_worker_arm")
	}
	ms := -1
	if timeout >= 0 {
		ms = int((timeout + time.Millisecond - 1) / time.Millisecond)
	}
	var evs [2]unix.EpollEvent
	n, err := unix.EpollWait(w.epfd, evs[:], ms)
	if err != nil && !errors.Is(err, unix.EINTR) {
		return false, fmt.Errorf("ucx: epoll_wait: %w", err)
	}
	for _, ev := range evs[:max(n, 0)] {
		if int(ev.Fd) == w.wakefd {
			var b [8]byte
			unix.Read(w.wakefd, b[:])
		}
	}
	return false, nil
}

// Progress drives the worker until it has nothing more to do (at most
// rounds calls of ucp_worker_progress) and returns the events processed.
func (w *Worker) Progress(rounds int) int {
	return int(C.kvc_progress(w.c, C.uint(rounds)))
}

// Completions appends the completions queued since the last call to dst.
func (w *Worker) Completions(dst []Completion) []Completion {
	if w.cmpl == nil {
		w.cmpl = make([]C.kvc_cmpl, w.slots)
	}
	n := int(C.kvc_drain_completions(w.c, &w.cmpl[0], C.uint32_t(len(w.cmpl))))
	for _, c := range w.cmpl[:n] {
		dst = append(dst, Completion{Slot: uint32(c.slot), Status: Status(c.status)})
	}
	return dst
}

// EndpointErrors appends the endpoint failures queued since the last call.
func (w *Worker) EndpointErrors(dst []EPError) []EPError {
	if w.errs == nil {
		w.errs = make([]C.kvc_eperr, 16)
	}
	for {
		n := int(C.kvc_drain_ep_errors(w.c, &w.errs[0], C.uint32_t(len(w.errs))))
		for _, e := range w.errs[:n] {
			dst = append(dst, EPError{EP: EP(e.ep), Status: Status(e.status)})
		}
		if n < len(w.errs) {
			return dst
		}
	}
}

// NextMessage pops the oldest received control message into buf (which
// should be MaxMessage long) and returns its length, or ok=false.
func (w *Worker) NextMessage(buf []byte) (n int, ok bool) {
	if len(buf) == 0 {
		return 0, false
	}
	r := int(C.kvc_next_msg(w.c, unsafe.Pointer(&buf[0]), C.size_t(len(buf))))
	if r < 0 {
		return 0, false
	}
	return r, true
}

// DroppedMessages counts control messages dropped on receipt (too large,
// rendezvous, or the queue was full).
func (w *Worker) DroppedMessages() uint64 { return uint64(C.kvc_dropped_msgs(w.c)) }

// Connect creates an endpoint to a peer worker's address. With
// peerErrors the endpoint uses UCP_ERR_HANDLING_MODE_PEER: failures are
// reported by EndpointErrors and it can be closed forcibly.
func (w *Worker) Connect(addr []byte, peerErrors bool) (EP, error) {
	if len(addr) == 0 {
		return 0, fmt.Errorf("ucp_ep_create: empty worker address: %w", errdefs.ErrInvalidArgument)
	}
	// UCX reads the address during the call only, and takes no length: it
	// comes from a peer (its descriptor, a hello), so copy it to C memory
	// followed by zeros, and a truncated or garbled one is never read past
	// the end of the allocation. No Go pointer is handed over.
	if len(addr) > MaxAddress {
		return 0, fmt.Errorf("ucp_ep_create: %d-byte worker address is larger than %d: %w", len(addr), MaxAddress, errdefs.ErrInvalidArgument)
	}
	ca := C.calloc(C.size_t(len(addr)+rkeyPad), 1)
	defer C.free(ca)
	copy(unsafe.Slice((*byte)(ca), len(addr)), addr)
	var ep C.uintptr_t
	pe := C.int(0)
	if peerErrors {
		pe = 1
	}
	if st := Status(C.kvc_ep_create(w.c, ca, C.size_t(len(addr)), pe, &ep)); st != OK {
		return 0, st.Error("ucp_ep_create")
	}
	return EP(ep), nil
}

// CloseEP starts closing ep; force is only valid for endpoints created
// with peerErrors. The result is OK (closed), InProgress (slot completes
// when closed) or an error (closed anyway).
func (w *Worker) CloseEP(slot uint32, ep EP, force bool) Status {
	f := C.int(0)
	if force {
		f = 1
	}
	return Status(C.kvc_ep_close(w.c, C.uint32_t(slot), C.uintptr_t(ep), f))
}

// SendMessage sends a control message (copied) to ep; like an Op it
// completes now (OK), later on its slot (InProgress), or fails. As for
// Post, the slot must not be in flight already.
func (w *Worker) SendMessage(slot uint32, ep EP, msg []byte) Status {
	if len(msg) == 0 || len(msg) > MaxMessage {
		return ErrInvalidParam
	}
	return Status(C.kvc_am_send(w.c, C.uint32_t(slot), C.uintptr_t(ep), unsafe.Pointer(&msg[0]), C.size_t(len(msg))))
}

// Post starts ops and sets each one's Status.
func (w *Worker) Post(ops []Op) {
	if len(ops) == 0 {
		return
	}
	if cap(w.ops) < len(ops) {
		w.ops = make([]C.kvc_op, len(ops))
	}
	cops := w.ops[:len(ops)]
	for i, o := range ops {
		cops[i] = C.kvc_op{kind: C.uint32_t(o.Kind), slot: C.uint32_t(o.Slot), ep: C.uintptr_t(o.EP),
			laddr: C.uintptr_t(o.Local), raddr: C.uint64_t(o.Remote), rkey: C.uintptr_t(o.Rkey), len: C.uint64_t(o.Len)}
	}
	C.kvc_post(w.c, &cops[0], C.size_t(len(cops)))
	for i := range ops {
		ops[i].Status = Status(cops[i].status)
	}
}

// MemMap registers [addr, addr+n) with the context (no allocation).
func (w *Worker) MemMap(addr uintptr, n uint64) (Mem, error) {
	var m C.uintptr_t
	if st := Status(C.kvc_mem_map(w.c, C.uintptr_t(addr), C.uint64_t(n), &m)); st != OK {
		return 0, st.Error("ucp_mem_map")
	}
	mapped.Add(1)
	return Mem(m), nil
}

// MemUnmap deregisters m.
func (w *Worker) MemUnmap(m Mem) error {
	if err := Status(C.kvc_mem_unmap(w.c, C.uintptr_t(m))).Error("ucp_mem_unmap"); err != nil {
		return err
	}
	mapped.Add(-1)
	return nil
}

// PackRkey packs m's remote key for peers.
func (w *Worker) PackRkey(m Mem) ([]byte, error) {
	var p unsafe.Pointer
	var n C.size_t
	if st := Status(C.kvc_rkey_pack(w.c, C.uintptr_t(m), &p, &n)); st != OK {
		return nil, st.Error("ucp_rkey_pack")
	}
	defer C.kvc_rkey_buffer_release(p)
	return C.GoBytes(p, C.int(n)), nil
}

// UnpackRkey unpacks a peer's packed remote key for use on ep.
func (w *Worker) UnpackRkey(ep EP, packed []byte) (Rkey, error) {
	if len(packed) == 0 {
		return 0, fmt.Errorf("ucp_ep_rkey_unpack: empty key: %w", errdefs.ErrInvalidArgument)
	}
	// ucp_ep_rkey_unpack takes no length: give it the key in C memory
	// followed by zeros, so a truncated key from a peer is never read past
	// the end of the allocation.
	if len(packed) > MaxRkey {
		return 0, fmt.Errorf("ucp_ep_rkey_unpack: %d-byte key is larger than %d: %w", len(packed), MaxRkey, errdefs.ErrInvalidArgument)
	}
	cb := C.calloc(C.size_t(len(packed)+rkeyPad), 1)
	defer C.free(cb)
	copy(unsafe.Slice((*byte)(cb), len(packed)), packed)
	var r C.uintptr_t
	if st := Status(C.kvc_rkey_unpack(C.uintptr_t(ep), cb, &r)); st != OK {
		return 0, st.Error("ucp_ep_rkey_unpack")
	}
	return Rkey(r), nil
}

const rkeyPad = 4096

// DestroyRkey releases an unpacked key.
func (w *Worker) DestroyRkey(r Rkey) { C.kvc_rkey_destroy(C.uintptr_t(r)) }
