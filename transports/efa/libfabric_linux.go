//go:build linux && cgo

package efa

/*
#cgo CFLAGS: -O2 -D_GNU_SOURCE
#cgo LDFLAGS: -ldl
#include <stdlib.h>
#include <string.h>
#include "shim.h"
*/
import "C"

import (
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"
)

// mr_mode bits (fi_mr(3)).
const (
	mrLocal      = uint64(C.FI_MR_LOCAL)
	mrVirtAddr   = uint64(C.FI_MR_VIRT_ADDR)
	mrAllocated  = uint64(C.FI_MR_ALLOCATED)
	mrProvKey    = uint64(C.FI_MR_PROV_KEY)
	mrEndpoint   = uint64(C.FI_MR_ENDPOINT)
	mrRaw        = uint64(C.FI_MR_RAW)
	mrBasic      = uint64(C.FI_MR_BASIC)
	mrScalable   = uint64(C.FI_MR_SCALABLE)
	mrRMAEvent   = uint64(C.FI_MR_RMA_EVENT)
	mrMMUNotify  = uint64(C.FI_MR_MMU_NOTIFY)
	mrHMEM       = uint64(C.FI_MR_HMEM)
	mrCollective = uint64(C.FI_MR_COLLECTIVE)

	// mrSupported is every bit this transport honours, declared in the
	// fi_getinfo hints.
	mrSupported = mrLocal | mrVirtAddr | mrAllocated | mrProvKey | mrEndpoint | mrRaw

	fiKeyNotAvail = uint64(C.FI_KEY_NOTAVAIL)
	fiAddrStr     = uint32(C.FI_ADDR_STR)

	fiThreadDomain   = int(C.FI_THREAD_DOMAIN)
	fiProgressManual = int(C.FI_PROGRESS_MANUAL)
)

func atomicLoad64(p *uint64) uint64     { return atomic.LoadUint64(p) }
func atomicStore64(p *uint64, v uint64) { atomic.StoreUint64(p, v) }

// minMinor is the libfabric 1.x minor version the transport needs.
const minMinor = 17

// kvf_open's failure steps.
const (
	openStepFabric = int(C.KVF_STEP_FABRIC)
	openStepDomain = int(C.KVF_STEP_DOMAIN)
	openStepAV     = int(C.KVF_STEP_AV)
	openStepCQ     = int(C.KVF_STEP_CQ)
	openStepEP     = int(C.KVF_STEP_EP)
	openStepBind   = int(C.KVF_STEP_BIND)
	openStepEnable = int(C.KVF_STEP_ENABLE)
	openStepMem    = int(C.KVF_STEP_MEM)
)

var openStepNames = map[int]string{
	openStepFabric: "fi_fabric", openStepDomain: "fi_domain", openStepAV: "fi_av_open", openStepCQ: "fi_cq_open",
	openStepEP: "fi_endpoint", openStepBind: "fi_ep_bind", openStepEnable: "fi_enable", openStepMem: "calloc",
}

var lib struct {
	mu     sync.Mutex
	path   string // the library loaded into this process, "" if none
	failed map[string]string
}

// loadLibrary dlopens path once per process. A second, different path is
// refused: the entry points are process-global.
func loadLibrary(path string) (err string, ok bool) {
	lib.mu.Lock()
	defer lib.mu.Unlock()
	if lib.path != "" {
		if lib.path == path {
			return "", true
		}
		return fmt.Sprintf("this process already loaded %s; one libfabric per process", lib.path), false
	}
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	buf := make([]byte, 512)
	if C.kvf_load(cpath, (*C.char)(unsafe.Pointer(&buf[0])), C.size_t(len(buf))) != 0 {
		return C.GoString((*C.char)(unsafe.Pointer(&buf[0]))), false
	}
	lib.path = path
	return "", true
}

// libVersion is the loaded libfabric's fi_version().
func libVersion() (major, minor int) {
	v := uint32(C.kvf_version())
	return int(v >> 16), int(v & 0xffff)
}

// fiStrerror is libfabric's text for a code (either sign).
func fiStrerror(code int) string {
	if code < 0 {
		code = -code
	}
	return C.GoString(C.kvf_strerror(C.int(code)))
}

// selectInfo runs fi_getinfo and picks the entry on domain ("" = the
// first). Layered providers (tcp;ofi_rxm) do not filter on the domain
// hint, so the list is filtered here too; EFA names its RDM domain after
// the device (rdmap16s27 -> rdmap16s27-rdm), so that name is tried as
// well. On failure it returns the code and, when only the domain was
// wrong, the provider's domains.
func selectInfo(provider, domain string) (*C.struct_fi_info, int, []string) {
	names := []string{domain}
	if domain != "" && !strings.HasSuffix(domain, "-rdm") {
		names = append(names, domain+"-rdm")
	}
	for _, d := range names {
		l, rc := getinfo(provider, d)
		if rc != 0 {
			continue
		}
		i := l.pick(d)
		l.free()
		if i != nil {
			return i, 0, nil
		}
	}
	l, rc := getinfo(provider, "")
	if rc != 0 {
		return nil, rc, nil
	}
	defer l.free()
	if domain == "" {
		return l.pick(""), 0, nil
	}
	return nil, -fiENODATA, l.domains()
}

// providerInfo is what the transport keeps of the fi_info it opened.
type providerInfo struct {
	Provider     string
	Fabric       string
	Domain       string
	MRMode       uint64
	MRKeySize    uint64
	MaxMsg       uint64
	TxSize       uint64
	Inject       uint64
	AddrFormat   uint32
	Threading    int
	DataProgress int
	ProvVersion  uint32
}

type infoList struct{ head *C.struct_fi_info }

// getinfo asks the provider for RDM + RMA endpoints (on one domain when
// named). It returns the libfabric code on failure.
func getinfo(provider, domain string) (infoList, int) {
	cprov := C.CString(provider)
	defer C.free(unsafe.Pointer(cprov))
	var cdom *C.char
	if domain != "" {
		cdom = C.CString(domain)
		defer C.free(unsafe.Pointer(cdom))
	}
	var out *C.struct_fi_info
	rc := int(C.kvf_getinfo(cprov, cdom, C.uint64_t(mrSupported), &out))
	if rc != 0 {
		return infoList{}, rc
	}
	return infoList{head: out}, 0
}

func (l infoList) free() { C.kvf_freeinfo(l.head) }

// pick returns a copy of the first entry on domain (any domain when
// domain is ""), or nil.
func (l infoList) pick(domain string) *C.struct_fi_info {
	for i := l.head; i != nil; i = C.kvf_info_next(i) {
		if domain == "" || C.GoString(C.kvf_info_domain(i)) == domain {
			return C.kvf_dupinfo(i)
		}
	}
	return nil
}

// domains lists the distinct domain names of the list.
func (l infoList) domains() []string {
	var out []string
	seen := map[string]bool{}
	for i := l.head; i != nil; i = C.kvf_info_next(i) {
		d := C.GoString(C.kvf_info_domain(i))
		if !seen[d] {
			seen[d] = true
			out = append(out, d)
		}
	}
	return out
}

func describe(i *C.struct_fi_info) providerInfo {
	return providerInfo{
		Provider:     C.GoString(C.kvf_info_prov(i)),
		Fabric:       C.GoString(C.kvf_info_fabric(i)),
		Domain:       C.GoString(C.kvf_info_domain(i)),
		MRMode:       uint64(C.kvf_info_mr_mode(i)),
		MRKeySize:    uint64(C.kvf_info_mr_key_size(i)),
		MaxMsg:       uint64(C.kvf_info_max_msg(i)),
		TxSize:       uint64(C.kvf_info_tx_size(i)),
		Inject:       uint64(C.kvf_info_inject(i)),
		AddrFormat:   uint32(C.kvf_info_addr_format(i)),
		Threading:    int(C.kvf_info_threading(i)),
		DataProgress: int(C.kvf_info_data_progress(i)),
		ProvVersion:  uint32(C.kvf_info_prov_version(i)),
	}
}

// cfab is an opened provider in C memory, with the buffers the progress
// thread passes to kvf_post and kvf_poll.
type cfab struct {
	p      *C.struct_kvf_fab
	ops    *C.struct_kvf_op
	nops   int
	slots  *C.uint32_t
	cqerr  *C.struct_kvf_cqerr
	info   providerInfo
	waitFD bool // the CQ has a wait descriptor that wakes kvf_block
}

const pollBatch = 64

// openC opens everything on info (which it takes ownership of) with nctx
// op contexts.
func openC(first *C.struct_fi_info, nctx int) (*cfab, int, string) {
	if first == nil {
		return nil, -fiENODATA, "fi_dupinfo"
	}
	c := &cfab{info: describe(first)}
	c.p = (*C.struct_kvf_fab)(C.calloc(1, C.size_t(unsafe.Sizeof(C.struct_kvf_fab{}))))
	var step C.int
	if rc := int(C.kvf_open(c.p, first, C.size_t(nctx), &step)); rc != 0 {
		C.free(unsafe.Pointer(c.p))
		return nil, rc, openStepNames[int(step)]
	}
	c.waitFD = c.p.wait_fd >= 0
	c.nops = nctx
	c.ops = (*C.struct_kvf_op)(C.calloc(C.size_t(nctx), C.size_t(unsafe.Sizeof(C.struct_kvf_op{}))))
	c.slots = (*C.uint32_t)(C.calloc(pollBatch, 4))
	c.cqerr = (*C.struct_kvf_cqerr)(C.calloc(1, C.size_t(unsafe.Sizeof(C.struct_kvf_cqerr{}))))
	return c, 0, ""
}

// free closes whatever is still open and frees the C memory.
func (c *cfab) free() {
	C.kvf_teardown(c.p)
	C.free(unsafe.Pointer(c.p))
	C.free(unsafe.Pointer(c.ops))
	C.free(unsafe.Pointer(c.slots))
	C.free(unsafe.Pointer(c.cqerr))
	c.p, c.ops, c.slots, c.cqerr = nil, nil, nil, nil
}

func (c *cfab) closeEP() int { return int(C.kvf_close_ep(c.p)) }

func (c *cfab) getname() ([]byte, int) {
	n := C.size_t(256)
	for {
		buf := C.malloc(n)
		got := n
		rc := int(C.kvf_getname(c.p, buf, &got))
		if rc == -fiETOOSMALL && got > n && got <= maxAddr {
			C.free(buf)
			n = got
			continue
		}
		if rc != 0 {
			C.free(buf)
			return nil, rc
		}
		out := C.GoBytes(buf, C.int(got))
		C.free(buf)
		return out, 0
	}
}

// cAddr copies a peer address into C memory, NUL-terminated (FI_ADDR_STR
// addresses are strings).
func cAddr(addr []byte) unsafe.Pointer {
	p := C.calloc(C.size_t(len(addr)+1), 1)
	copy(unsafe.Slice((*byte)(p), len(addr)), addr)
	return p
}

func (c *cfab) straddr(addr []byte) string {
	a := cAddr(addr)
	defer C.free(a)
	buf := make([]byte, 256)
	n := C.size_t(len(buf))
	s := C.kvf_straddr(c.p, a, (*C.char)(unsafe.Pointer(&buf[0])), &n)
	if s == nil {
		return ""
	}
	return C.GoString((*C.char)(unsafe.Pointer(&buf[0])))
}

func (c *cfab) avInsert(addr []byte) (uint64, int) {
	a := cAddr(addr)
	defer C.free(a)
	var out C.uint64_t
	rc := int(C.kvf_av_insert(c.p, a, &out))
	return uint64(out), rc
}

func (c *cfab) avRemove(a uint64) int { return int(C.kvf_av_remove(c.p, C.uint64_t(a))) }

// mrHandle is a registered memory region.
type mrHandle struct {
	mr    *C.struct_fid_mr
	desc  uintptr
	key   uint64
	base  uint64
	raw   []byte
	bound bool
}

// Access rights of registrations.
const (
	accessRegion = uint64(C.FI_READ | C.FI_WRITE | C.FI_REMOTE_READ | C.FI_REMOTE_WRITE)
	accessStatus = uint64(C.FI_REMOTE_READ) // the status table: peers read it
	accessProbe  = uint64(C.FI_READ)        // the probe buffer: sink of our reads
)

// mrReg registers mem, requesting reqKey (ignored with FI_MR_PROV_KEY).
func (c *cfab) mrReg(mem []byte, access, reqKey uint64) (*mrHandle, int) {
	addr := uintptr(unsafe.Pointer(unsafe.SliceData(mem)))
	var mr *C.struct_fid_mr
	var bound C.int
	rc := int(C.kvf_mr_reg(c.p, C.uintptr_t(addr), C.size_t(len(mem)), C.uint64_t(access), C.uint64_t(reqKey), C.uint64_t(c.info.MRMode), &mr, &bound))
	runtime.KeepAlive(mem)
	if rc != 0 {
		return nil, rc
	}
	h := &mrHandle{mr: mr, bound: bound != 0, key: uint64(C.kvf_mr_key(mr))}
	h.desc = uintptr(C.kvf_mr_desc(mr))
	return h, 0
}

// mrRawKey reads an FI_MR_RAW key and the base address peers must use.
func (c *cfab) mrRawKey(h *mrHandle) int {
	n := C.size_t(c.info.MRKeySize)
	if n == 0 || n > maxRawKey {
		n = maxRawKey
	}
	buf := (*C.uint8_t)(C.calloc(n, 1))
	defer C.free(unsafe.Pointer(buf))
	var base C.uint64_t
	rc := int(C.kvf_mr_raw(h.mr, &base, buf, &n))
	if rc != 0 {
		return rc
	}
	if n == 0 || n > maxRawKey {
		return -fiETOOSMALL
	}
	h.base = uint64(base)
	h.raw = C.GoBytes(unsafe.Pointer(buf), C.int(n))
	return 0
}

func (c *cfab) mrClose(h *mrHandle) int { return int(C.kvf_mr_close(h.mr)) }

func (c *cfab) mapRaw(base uint64, raw []byte) (uint64, int) {
	p := C.CBytes(raw)
	defer C.free(p)
	var key C.uint64_t
	rc := int(C.kvf_mr_map_raw(c.p, C.uint64_t(base), (*C.uint8_t)(p), C.size_t(len(raw)), &key))
	return uint64(key), rc
}

func (c *cfab) unmapKey(key uint64) int { return int(C.kvf_mr_unmap_key(c.p, C.uint64_t(key))) }

// cmem is zeroed C memory (never seen by the garbage collector, so
// providers may keep its address).
type cmem struct {
	p unsafe.Pointer
	n int
}

func newCmem(n int) cmem {
	p := C.calloc(C.size_t(n), 1)
	if p == nil {
		return cmem{}
	}
	C.memset(p, 0, C.size_t(n)) // touch every page: FI_MR_ALLOCATED
	return cmem{p: p, n: n}
}

func (m cmem) bytes() []byte { return unsafe.Slice((*byte)(m.p), m.n) }

func (m cmem) addr() uint64 { return uint64(uintptr(m.p)) }

// word reads the 8-byte word i (native byte order, as peers wrote it).
func (m cmem) word(i uint32) uint64 {
	return atomicLoad64((*uint64)(unsafe.Add(m.p, uintptr(i)*8)))
}

// setWord writes the 8-byte word i.
func (m cmem) setWord(i uint32, v uint64) {
	atomicStore64((*uint64)(unsafe.Add(m.p, uintptr(i)*8)), v)
}

func (m *cmem) free() {
	C.free(m.p)
	m.p = nil
	m.n = 0
}

// postOp is one RMA operation for post.
type postOp struct {
	laddr, n, raddr, rkey, dest uint64
	desc                        uintptr
	slot                        uint32
	write                       bool
}

// post posts ops in order; it returns how many were posted and the code
// of the first that was not (0 when all were).
func (c *cfab) post(ops []postOp) (int, int) {
	if len(ops) > c.nops {
		ops = ops[:c.nops]
	}
	dst := unsafe.Slice(c.ops, len(ops))
	for i, o := range ops {
		w := C.uint32_t(0)
		if o.write {
			w = 1
		}
		dst[i] = C.struct_kvf_op{laddr: C.uint64_t(o.laddr), len: C.uint64_t(o.n), raddr: C.uint64_t(o.raddr),
			key: C.uint64_t(o.rkey), dest: C.uint64_t(o.dest), desc: C.uintptr_t(o.desc), slot: C.uint32_t(o.slot), write: w}
	}
	var posted C.int
	rc := int(C.kvf_post(c.p, c.ops, C.int(len(ops)), &posted))
	return int(posted), rc
}

// cqError is a CQ error entry.
type cqError struct {
	slot      uint32
	err       int
	provErrno int
	text      string
}

// poll progresses the provider and reads completions into slots (at most
// pollBatch). It returns the count or a negative code; on -FI_EAVAIL e
// holds the error entry.
func (c *cfab) poll(slots []uint32) (int, cqError) {
	n := int(C.kvf_poll(c.p, c.slots, C.size_t(min(len(slots), pollBatch)), c.cqerr))
	if n > 0 {
		copy(slots, unsafe.Slice((*uint32)(unsafe.Pointer(c.slots)), n))
		return n, cqError{}
	}
	if n == -fiEAVAIL {
		e := c.cqerr
		return n, cqError{slot: uint32(e.slot), err: int(e.err), provErrno: int(e.prov_errno),
			text: C.GoString(&e.text[0])}
	}
	return n, cqError{}
}

// block sleeps until the provider has progress to make, wake is called,
// or d passes.
func (c *cfab) block(d time.Duration) { C.kvf_block(c.p, C.int64_t(d)) }

// wake ends a block, now or the next one. Safe from any goroutine while
// the fabric is open.
func (c *cfab) wake() { C.kvf_wake(c.p) }
