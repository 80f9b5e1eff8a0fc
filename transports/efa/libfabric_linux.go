//go:build linux && cgo

package efa

/*
#cgo CFLAGS: -O2 -D_GNU_SOURCE
#cgo LDFLAGS: -ldl

#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <sys/eventfd.h>
#include <poll.h>
#include <time.h>
#include <unistd.h>
#include <errno.h>
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>

// libfabric is dlopen'ed, never linked: a host without it gets a
// diagnosis, not a plugin the loader refuses to start. Only six functions
// are exported symbols; every other fi_* call is a static inline in the
// headers that jumps through the object's ops table. They are bound with
// dlvsym to the symbol versions these (1.17) headers were written for, so
// a newer libfabric hands us the struct layouts we compiled against.
typedef int (*kvc_getinfo_fn)(uint32_t, const char *, const char *, uint64_t, const struct fi_info *, struct fi_info **);
typedef void (*kvc_freeinfo_fn)(struct fi_info *);
typedef struct fi_info *(*kvc_dupinfo_fn)(const struct fi_info *);
typedef int (*kvc_fabric_fn)(struct fi_fabric_attr *, struct fid_fabric **, void *);
typedef const char *(*kvc_strerror_fn)(int);
typedef uint32_t (*kvc_version_fn)(void);

static struct {
	void *handle;
	kvc_getinfo_fn getinfo;
	kvc_freeinfo_fn freeinfo;
	kvc_dupinfo_fn dupinfo;
	kvc_fabric_fn fabric;
	kvc_strerror_fn strerror;
	kvc_version_fn version;
} kvc_lib;

static void *kvc_sym(void *h, const char *name, const char *ver) {
	void *p = dlvsym(h, name, ver);
	return p ? p : dlsym(h, name);
}

// kvc_load opens path and resolves the entry points: 0, or -1 with the
// reason in err.
static int kvc_load(const char *path, char *err, size_t errlen) {
	void *h;
	dlerror();
	h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		const char *e = dlerror();
		snprintf(err, errlen, "%s", e ? e : "dlopen failed");
		return -1;
	}
	kvc_lib.getinfo = (kvc_getinfo_fn)kvc_sym(h, "fi_getinfo", "FABRIC_1.3");
	kvc_lib.freeinfo = (kvc_freeinfo_fn)kvc_sym(h, "fi_freeinfo", "FABRIC_1.3");
	kvc_lib.dupinfo = (kvc_dupinfo_fn)kvc_sym(h, "fi_dupinfo", "FABRIC_1.3");
	kvc_lib.fabric = (kvc_fabric_fn)kvc_sym(h, "fi_fabric", "FABRIC_1.1");
	kvc_lib.strerror = (kvc_strerror_fn)kvc_sym(h, "fi_strerror", "FABRIC_1.0");
	kvc_lib.version = (kvc_version_fn)kvc_sym(h, "fi_version", "FABRIC_1.0");
	if (!kvc_lib.getinfo || !kvc_lib.freeinfo || !kvc_lib.dupinfo || !kvc_lib.fabric ||
	    !kvc_lib.strerror || !kvc_lib.version) {
		snprintf(err, errlen, "%s does not export the libfabric API (fi_getinfo, fi_fabric, ...)", path);
		dlclose(h);
		memset(&kvc_lib, 0, sizeof(kvc_lib));
		return -1;
	}
	kvc_lib.handle = h;
	return 0;
}

static uint32_t kvc_version(void) { return kvc_lib.version(); }

static const char *kvc_strerror(int e) { return kvc_lib.strerror(e); }

static void kvc_freeinfo(struct fi_info *i) { if (i) kvc_lib.freeinfo(i); }

// kvc_getinfo asks for RDM endpoints with RMA from one provider (and
// domain, when named), declaring every mr_mode bit this transport honours.
static int kvc_getinfo(const char *prov, const char *domain, uint64_t mr_mode, struct fi_info **out) {
	struct fi_info *hints = kvc_lib.dupinfo(NULL);
	int rc;
	if (!hints)
		return -FI_ENOMEM;
	hints->caps = FI_RMA | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE;
	hints->mode = FI_CONTEXT | FI_CONTEXT2;
	hints->ep_attr->type = FI_EP_RDM;
	hints->domain_attr->mr_mode = (int)mr_mode;
	hints->domain_attr->threading = FI_THREAD_DOMAIN;
	hints->fabric_attr->prov_name = strdup(prov);
	if (domain && *domain)
		hints->domain_attr->name = strdup(domain);
	rc = kvc_lib.getinfo(FI_VERSION(1, 17), NULL, NULL, 0, hints, out);
	kvc_lib.freeinfo(hints);
	return rc;
}

// kvc_fab is one opened provider: the objects, and the contexts of posted
// operations (C memory, so the provider never holds a Go pointer).
struct kvc_fab {
	struct fi_info *info;
	struct fid_fabric *fabric;
	struct fid_domain *domain;
	struct fid_av *av;
	struct fid_cq *cq;
	struct fid_ep *ep;
	int wait_fd;   // the CQ's FI_WAIT_FD descriptor, -1 without one
	int event_fd;  // wakes the progress thread when work is queued
	struct fi_context2 *ctx;
	size_t nctx;
};

enum { KVC_STEP_FABRIC = 1, KVC_STEP_DOMAIN, KVC_STEP_AV, KVC_STEP_CQ, KVC_STEP_EP, KVC_STEP_BIND, KVC_STEP_ENABLE, KVC_STEP_MEM };

static void kvc_close_fid(struct fid *f) { if (f) fi_close(f); }

static void kvc_teardown(struct kvc_fab *f) {
	kvc_close_fid(f->ep ? &f->ep->fid : NULL);
	kvc_close_fid(f->av ? &f->av->fid : NULL);
	kvc_close_fid(f->cq ? &f->cq->fid : NULL);
	kvc_close_fid(f->domain ? &f->domain->fid : NULL);
	kvc_close_fid(f->fabric ? &f->fabric->fid : NULL);
	f->ep = NULL; f->av = NULL; f->cq = NULL; f->domain = NULL; f->fabric = NULL;
	free(f->ctx);
	f->ctx = NULL;
	if (f->event_fd >= 0)
		close(f->event_fd);
	f->event_fd = -1;
	f->wait_fd = -1;
	kvc_freeinfo(f->info);
	f->info = NULL;
}

// kvc_open opens fabric, domain, AV, CQ and endpoint from info (which f
// then owns). On failure it returns the libfabric code and the step.
static int kvc_open(struct kvc_fab *f, struct fi_info *info, size_t nctx, int *step) {
	struct fi_av_attr av_attr;
	struct fi_cq_attr cq_attr;
	int rc;

	memset(f, 0, sizeof(*f));
	f->wait_fd = -1;
	f->event_fd = -1;
	f->info = info;
	f->nctx = nctx;
	f->ctx = calloc(nctx, sizeof(struct fi_context2));
	if (!f->ctx) { *step = KVC_STEP_MEM; rc = -FI_ENOMEM; goto fail; }
	*step = KVC_STEP_FABRIC;
	if ((rc = kvc_lib.fabric(info->fabric_attr, &f->fabric, NULL))) goto fail;
	*step = KVC_STEP_DOMAIN;
	if ((rc = fi_domain(f->fabric, info, &f->domain, NULL))) goto fail;
	*step = KVC_STEP_AV;
	memset(&av_attr, 0, sizeof(av_attr));
	av_attr.type = FI_AV_TABLE;
	if ((rc = fi_av_open(f->domain, &av_attr, &f->av, NULL))) goto fail;
	*step = KVC_STEP_MEM;
	f->event_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (f->event_fd < 0) { rc = -errno; goto fail; }
	*step = KVC_STEP_CQ;
	memset(&cq_attr, 0, sizeof(cq_attr));
	cq_attr.format = FI_CQ_FORMAT_CONTEXT;
	cq_attr.wait_obj = FI_WAIT_FD;
	if (fi_cq_open(f->domain, &cq_attr, &f->cq, NULL) == 0) {
		int fd = -1;
		if (fi_control(&f->cq->fid, FI_GETWAIT, &fd) == 0 && fd >= 0)
			f->wait_fd = fd;
	} else {
		// No file descriptor to wait on: the progress thread sleeps
		// between polls instead.
		f->cq = NULL;
		cq_attr.wait_obj = FI_WAIT_NONE;
		if ((rc = fi_cq_open(f->domain, &cq_attr, &f->cq, NULL))) goto fail;
	}
	*step = KVC_STEP_EP;
	if ((rc = fi_endpoint(f->domain, info, &f->ep, NULL))) goto fail;
	*step = KVC_STEP_BIND;
	if ((rc = fi_ep_bind(f->ep, &f->av->fid, 0))) goto fail;
	if ((rc = fi_ep_bind(f->ep, &f->cq->fid, FI_TRANSMIT | FI_RECV))) goto fail;
	*step = KVC_STEP_ENABLE;
	if ((rc = fi_enable(f->ep))) goto fail;
	*step = 0;
	return 0;
fail:
	kvc_teardown(f);
	return rc;
}

static int kvc_getname(struct kvc_fab *f, void *buf, size_t *len) {
	return fi_getname(&f->ep->fid, buf, len);
}

static const char *kvc_straddr(struct kvc_fab *f, const void *addr, char *buf, size_t *len) {
	return fi_av_straddr(f->av, addr, buf, len);
}

static int kvc_av_insert(struct kvc_fab *f, const void *addr, uint64_t *out) {
	fi_addr_t a = FI_ADDR_NOTAVAIL;
	int n = fi_av_insert(f->av, addr, 1, &a, 0, NULL);
	if (n < 0)
		return n;
	if (n != 1 || a == FI_ADDR_NOTAVAIL)
		return -FI_EADDRNOTAVAIL;
	*out = a;
	return 0;
}

static int kvc_av_remove(struct kvc_fab *f, uint64_t a) {
	fi_addr_t addr = a;
	return fi_av_remove(f->av, &addr, 1, 0);
}

// kvc_mr_reg registers [addr, addr+len) for local and remote RMA, binding
// and enabling it on the endpoint when the provider wants FI_MR_ENDPOINT.
static int kvc_mr_reg(struct kvc_fab *f, uintptr_t addr, size_t len, uint64_t access, uint64_t req_key, uint64_t mr_mode, struct fid_mr **out, int *bound) {
	struct fid_mr *mr = NULL;
	int rc = fi_mr_reg(f->domain, (void *)addr, len, access, 0, req_key, 0, &mr, NULL);
	*bound = 0;
	if (rc)
		return rc;
	if (mr_mode & FI_MR_ENDPOINT) {
		*bound = 1;
		if ((rc = fi_mr_bind(mr, &f->ep->fid, 0)) || (rc = fi_mr_enable(mr))) {
			fi_close(&mr->fid);
			return rc;
		}
	}
	*out = mr;
	return 0;
}

static uint64_t kvc_mr_key(struct fid_mr *mr) { return fi_mr_key(mr); }
static uintptr_t kvc_mr_desc(struct fid_mr *mr) { return (uintptr_t)fi_mr_desc(mr); }
static int kvc_mr_close(struct fid_mr *mr) { return fi_close(&mr->fid); }

static int kvc_mr_raw(struct fid_mr *mr, uint64_t *base, uint8_t *raw, size_t *len) {
	return fi_mr_raw_attr(mr, base, raw, len, 0);
}

static int kvc_mr_map_raw(struct kvc_fab *f, uint64_t base, uint8_t *raw, size_t len, uint64_t *key) {
	return fi_mr_map_raw(f->domain, base, raw, len, key, 0);
}

static int kvc_mr_unmap_key(struct kvc_fab *f, uint64_t key) {
	return fi_mr_unmap_key(f->domain, key);
}

// kvc_op is one RMA operation to post; slot names its context.
struct kvc_op {
	uint64_t laddr, len, raddr, key, dest;
	uintptr_t desc;
	uint32_t slot, write;
};

// kvc_post posts ops in order until one fails (-FI_EAGAIN: the queue is
// full). *posted is how many went out.
static ssize_t kvc_post(struct kvc_fab *f, struct kvc_op *ops, int n, int *posted) {
	int i;
	for (i = 0; i < n; i++) {
		struct kvc_op *o = &ops[i];
		struct iovec iov = { (void *)(uintptr_t)o->laddr, o->len };
		struct fi_rma_iov rma = { o->raddr, o->len, o->key };
		void *desc = (void *)o->desc;
		struct fi_msg_rma msg;
		ssize_t rc;
		memset(&msg, 0, sizeof(msg));
		msg.msg_iov = &iov;
		msg.desc = &desc;
		msg.iov_count = 1;
		msg.addr = o->dest;
		msg.rma_iov = &rma;
		msg.rma_iov_count = 1;
		msg.context = &f->ctx[o->slot];
		if (o->write)
			rc = fi_writemsg(f->ep, &msg, FI_COMPLETION | FI_DELIVERY_COMPLETE);
		else
			rc = fi_readmsg(f->ep, &msg, FI_COMPLETION);
		if (rc) {
			*posted = i;
			return rc;
		}
	}
	*posted = n;
	return 0;
}

struct kvc_cqerr {
	uint32_t slot;
	int err;
	int prov_errno;
	char text[256];
};

static uint32_t kvc_slot(struct kvc_fab *f, void *ctx) {
	struct fi_context2 *c = ctx;
	if (c < f->ctx || c >= f->ctx + f->nctx)
		return UINT32_MAX;
	return (uint32_t)(c - f->ctx);
}

// kvc_poll progresses the provider and reads up to max completions into
// slots. It returns the count, -FI_EAGAIN, -FI_EAVAIL with the error entry
// in e, or another negative code.
static ssize_t kvc_poll(struct kvc_fab *f, uint32_t *slots, size_t max, struct kvc_cqerr *e) {
	struct fi_cq_entry ent[64];
	ssize_t n, i;
	if (max > 64)
		max = 64;
	n = fi_cq_read(f->cq, ent, max);
	if (n > 0) {
		for (i = 0; i < n; i++)
			slots[i] = kvc_slot(f, ent[i].op_context);
		return n;
	}
	if (n == -FI_EAVAIL) {
		struct fi_cq_err_entry ee;
		ssize_t r;
		memset(&ee, 0, sizeof(ee));
		r = fi_cq_readerr(f->cq, &ee, 0);
		if (r < 0)
			return r == -FI_EAGAIN ? -FI_EAGAIN : r;
		e->slot = kvc_slot(f, ee.op_context);
		e->err = ee.err;
		e->prov_errno = ee.prov_errno;
		e->text[0] = 0;
		{
			const char *s = fi_cq_strerror(f->cq, ee.prov_errno, ee.err_data, e->text, sizeof(e->text));
			if (s && s != e->text)
				snprintf(e->text, sizeof(e->text), "%s", s);
		}
		return -FI_EAVAIL;
	}
	return n;
}

// kvc_block sleeps until the provider's wait descriptor is readable (it
// has progress to make), the event fd is written, or timeout_ns passes.
// fi_trywait first: it says whether blocking is safe. fi_cq_sread is not
// used: some providers (shm in 1.17) do not honour its timeout.
static void kvc_block(struct kvc_fab *f, int64_t timeout_ns) {
	struct pollfd p[2];
	struct timespec ts = { timeout_ns / 1000000000, timeout_ns % 1000000000 };
	int n = 0;
	uint64_t v;
	if (f->wait_fd >= 0) {
		struct fid *fids[1] = { &f->cq->fid };
		if (fi_trywait(f->fabric, fids, 1) != 0)
			return;
		p[n].fd = f->wait_fd;
		p[n].events = POLLIN;
		p[n].revents = 0;
		n++;
	}
	p[n].fd = f->event_fd;
	p[n].events = POLLIN;
	p[n].revents = 0;
	n++;
	if (ppoll(p, n, &ts, NULL) > 0 && (p[n - 1].revents & POLLIN)) {
		while (read(f->event_fd, &v, sizeof(v)) == sizeof(v))
			;
	}
}

// kvc_wake makes kvc_block return. Any thread may call it.
static void kvc_wake(struct kvc_fab *f) {
	uint64_t one = 1;
	ssize_t r = write(f->event_fd, &one, sizeof(one));
	(void)r;
}

static int kvc_close_ep(struct kvc_fab *f) {
	int rc = 0;
	if (f->ep) {
		rc = fi_close(&f->ep->fid);
		f->ep = NULL;
	}
	return rc;
}

// info accessors (cgo cannot reach through the union-free but nested
// attribute pointers as conveniently).
static uint64_t kvc_info_mr_mode(struct fi_info *i) { return (uint64_t)i->domain_attr->mr_mode; }
static size_t kvc_info_mr_key_size(struct fi_info *i) { return i->domain_attr->mr_key_size; }
static size_t kvc_info_max_msg(struct fi_info *i) { return i->ep_attr->max_msg_size; }
static size_t kvc_info_tx_size(struct fi_info *i) { return i->tx_attr->size; }
static size_t kvc_info_inject(struct fi_info *i) { return i->tx_attr->inject_size; }
static uint32_t kvc_info_addr_format(struct fi_info *i) { return i->addr_format; }
static const char *kvc_info_prov(struct fi_info *i) { return i->fabric_attr->prov_name; }
static const char *kvc_info_fabric(struct fi_info *i) { return i->fabric_attr->name; }
static const char *kvc_info_domain(struct fi_info *i) { return i->domain_attr->name; }
static int kvc_info_threading(struct fi_info *i) { return i->domain_attr->threading; }
static int kvc_info_data_progress(struct fi_info *i) { return i->domain_attr->data_progress; }
static struct fi_info *kvc_info_next(struct fi_info *i) { return i->next; }
static struct fi_info *kvc_dupinfo(struct fi_info *i) { return kvc_lib.dupinfo(i); }
static uint32_t kvc_info_prov_version(struct fi_info *i) { return i->fabric_attr->prov_version; }
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

// kvc_open's failure steps.
const (
	openStepFabric = int(C.KVC_STEP_FABRIC)
	openStepDomain = int(C.KVC_STEP_DOMAIN)
	openStepAV     = int(C.KVC_STEP_AV)
	openStepCQ     = int(C.KVC_STEP_CQ)
	openStepEP     = int(C.KVC_STEP_EP)
	openStepBind   = int(C.KVC_STEP_BIND)
	openStepEnable = int(C.KVC_STEP_ENABLE)
	openStepMem    = int(C.KVC_STEP_MEM)
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
	if C.kvc_load(cpath, (*C.char)(unsafe.Pointer(&buf[0])), C.size_t(len(buf))) != 0 {
		return C.GoString((*C.char)(unsafe.Pointer(&buf[0]))), false
	}
	lib.path = path
	return "", true
}

// libVersion is the loaded libfabric's fi_version().
func libVersion() (major, minor int) {
	v := uint32(C.kvc_version())
	return int(v >> 16), int(v & 0xffff)
}

// fiStrerror is libfabric's text for a code (either sign).
func fiStrerror(code int) string {
	if code < 0 {
		code = -code
	}
	return C.GoString(C.kvc_strerror(C.int(code)))
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
	rc := int(C.kvc_getinfo(cprov, cdom, C.uint64_t(mrSupported), &out))
	if rc != 0 {
		return infoList{}, rc
	}
	return infoList{head: out}, 0
}

func (l infoList) free() { C.kvc_freeinfo(l.head) }

// pick returns a copy of the first entry on domain (any domain when
// domain is ""), or nil.
func (l infoList) pick(domain string) *C.struct_fi_info {
	for i := l.head; i != nil; i = C.kvc_info_next(i) {
		if domain == "" || C.GoString(C.kvc_info_domain(i)) == domain {
			return C.kvc_dupinfo(i)
		}
	}
	return nil
}

// domains lists the distinct domain names of the list.
func (l infoList) domains() []string {
	var out []string
	seen := map[string]bool{}
	for i := l.head; i != nil; i = C.kvc_info_next(i) {
		d := C.GoString(C.kvc_info_domain(i))
		if !seen[d] {
			seen[d] = true
			out = append(out, d)
		}
	}
	return out
}

func describe(i *C.struct_fi_info) providerInfo {
	return providerInfo{
		Provider:     C.GoString(C.kvc_info_prov(i)),
		Fabric:       C.GoString(C.kvc_info_fabric(i)),
		Domain:       C.GoString(C.kvc_info_domain(i)),
		MRMode:       uint64(C.kvc_info_mr_mode(i)),
		MRKeySize:    uint64(C.kvc_info_mr_key_size(i)),
		MaxMsg:       uint64(C.kvc_info_max_msg(i)),
		TxSize:       uint64(C.kvc_info_tx_size(i)),
		Inject:       uint64(C.kvc_info_inject(i)),
		AddrFormat:   uint32(C.kvc_info_addr_format(i)),
		Threading:    int(C.kvc_info_threading(i)),
		DataProgress: int(C.kvc_info_data_progress(i)),
		ProvVersion:  uint32(C.kvc_info_prov_version(i)),
	}
}

// cfab is an opened provider in C memory, with the buffers the progress
// thread passes to kvc_post and kvc_poll.
type cfab struct {
	p      *C.struct_kvc_fab
	ops    *C.struct_kvc_op
	nops   int
	slots  *C.uint32_t
	cqerr  *C.struct_kvc_cqerr
	info   providerInfo
	waitFD bool // the CQ has a wait descriptor that wakes kvc_block
}

const pollBatch = 64

// openC opens everything on info (which it takes ownership of) with nctx
// op contexts.
func openC(first *C.struct_fi_info, nctx int) (*cfab, int, string) {
	if first == nil {
		return nil, -fiENODATA, "fi_dupinfo"
	}
	c := &cfab{info: describe(first)}
	c.p = (*C.struct_kvc_fab)(C.calloc(1, C.size_t(unsafe.Sizeof(C.struct_kvc_fab{}))))
	var step C.int
	if rc := int(C.kvc_open(c.p, first, C.size_t(nctx), &step)); rc != 0 {
		C.free(unsafe.Pointer(c.p))
		return nil, rc, openStepNames[int(step)]
	}
	c.waitFD = c.p.wait_fd >= 0
	c.nops = nctx
	c.ops = (*C.struct_kvc_op)(C.calloc(C.size_t(nctx), C.size_t(unsafe.Sizeof(C.struct_kvc_op{}))))
	c.slots = (*C.uint32_t)(C.calloc(pollBatch, 4))
	c.cqerr = (*C.struct_kvc_cqerr)(C.calloc(1, C.size_t(unsafe.Sizeof(C.struct_kvc_cqerr{}))))
	return c, 0, ""
}

// free closes whatever is still open and frees the C memory.
func (c *cfab) free() {
	C.kvc_teardown(c.p)
	C.free(unsafe.Pointer(c.p))
	C.free(unsafe.Pointer(c.ops))
	C.free(unsafe.Pointer(c.slots))
	C.free(unsafe.Pointer(c.cqerr))
	c.p, c.ops, c.slots, c.cqerr = nil, nil, nil, nil
}

func (c *cfab) closeEP() int { return int(C.kvc_close_ep(c.p)) }

func (c *cfab) getname() ([]byte, int) {
	n := C.size_t(256)
	for {
		buf := C.malloc(n)
		got := n
		rc := int(C.kvc_getname(c.p, buf, &got))
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
	s := C.kvc_straddr(c.p, a, (*C.char)(unsafe.Pointer(&buf[0])), &n)
	if s == nil {
		return ""
	}
	return C.GoString((*C.char)(unsafe.Pointer(&buf[0])))
}

func (c *cfab) avInsert(addr []byte) (uint64, int) {
	a := cAddr(addr)
	defer C.free(a)
	var out C.uint64_t
	rc := int(C.kvc_av_insert(c.p, a, &out))
	return uint64(out), rc
}

func (c *cfab) avRemove(a uint64) int { return int(C.kvc_av_remove(c.p, C.uint64_t(a))) }

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
	rc := int(C.kvc_mr_reg(c.p, C.uintptr_t(addr), C.size_t(len(mem)), C.uint64_t(access), C.uint64_t(reqKey), C.uint64_t(c.info.MRMode), &mr, &bound))
	runtime.KeepAlive(mem)
	if rc != 0 {
		return nil, rc
	}
	h := &mrHandle{mr: mr, bound: bound != 0, key: uint64(C.kvc_mr_key(mr))}
	h.desc = uintptr(C.kvc_mr_desc(mr))
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
	rc := int(C.kvc_mr_raw(h.mr, &base, buf, &n))
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

func (c *cfab) mrClose(h *mrHandle) int { return int(C.kvc_mr_close(h.mr)) }

func (c *cfab) mapRaw(base uint64, raw []byte) (uint64, int) {
	p := C.CBytes(raw)
	defer C.free(p)
	var key C.uint64_t
	rc := int(C.kvc_mr_map_raw(c.p, C.uint64_t(base), (*C.uint8_t)(p), C.size_t(len(raw)), &key))
	return uint64(key), rc
}

func (c *cfab) unmapKey(key uint64) int { return int(C.kvc_mr_unmap_key(c.p, C.uint64_t(key))) }

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
		dst[i] = C.struct_kvc_op{laddr: C.uint64_t(o.laddr), len: C.uint64_t(o.n), raddr: C.uint64_t(o.raddr),
			key: C.uint64_t(o.rkey), dest: C.uint64_t(o.dest), desc: C.uintptr_t(o.desc), slot: C.uint32_t(o.slot), write: w}
	}
	var posted C.int
	rc := int(C.kvc_post(c.p, c.ops, C.int(len(ops)), &posted))
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
	n := int(C.kvc_poll(c.p, c.slots, C.size_t(min(len(slots), pollBatch)), c.cqerr))
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
func (c *cfab) block(d time.Duration) { C.kvc_block(c.p, C.int64_t(d)) }

// wake ends a block, now or the next one. Safe from any goroutine while
// the fabric is open.
func (c *cfab) wake() { C.kvc_wake(c.p) }
