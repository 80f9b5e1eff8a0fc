//go:build linux && cgo

#include "shim.h"

#include <dlfcn.h>
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_rma.h>

// libfabric is dlopen'ed, never linked: a host without it gets a
// diagnosis, not a plugin the loader refuses to start. Only six functions
// are exported symbols; every other fi_* call is a static inline in the
// headers that jumps through the object's ops table. They are bound with
// dlvsym to the symbol versions these (1.17) headers were written for, so
// a newer libfabric hands us the struct layouts we compiled against.
typedef int (*kvf_getinfo_fn)(uint32_t, const char *, const char *, uint64_t, const struct fi_info *, struct fi_info **);
typedef void (*kvf_freeinfo_fn)(struct fi_info *);
typedef struct fi_info *(*kvf_dupinfo_fn)(const struct fi_info *);
typedef int (*kvf_fabric_fn)(struct fi_fabric_attr *, struct fid_fabric **, void *);
typedef const char *(*kvf_strerror_fn)(int);
typedef uint32_t (*kvf_version_fn)(void);

static struct {
	void *handle;
	kvf_getinfo_fn getinfo;
	kvf_freeinfo_fn freeinfo;
	kvf_dupinfo_fn dupinfo;
	kvf_fabric_fn fabric;
	kvf_strerror_fn strerror;
	kvf_version_fn version;
} kvf_lib;

static void *kvf_sym(void *h, const char *name, const char *ver) {
	void *p = dlvsym(h, name, ver);
	return p ? p : dlsym(h, name);
}

// kvf_load opens path and resolves the entry points: 0, or -1 with the
// reason in err.
int kvf_load(const char *path, char *err, size_t errlen) {
	void *h;
	dlerror();
	h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		const char *e = dlerror();
		snprintf(err, errlen, "%s", e ? e : "dlopen failed");
		return -1;
	}
	kvf_lib.getinfo = (kvf_getinfo_fn)kvf_sym(h, "fi_getinfo", "FABRIC_1.3");
	kvf_lib.freeinfo = (kvf_freeinfo_fn)kvf_sym(h, "fi_freeinfo", "FABRIC_1.3");
	kvf_lib.dupinfo = (kvf_dupinfo_fn)kvf_sym(h, "fi_dupinfo", "FABRIC_1.3");
	kvf_lib.fabric = (kvf_fabric_fn)kvf_sym(h, "fi_fabric", "FABRIC_1.1");
	kvf_lib.strerror = (kvf_strerror_fn)kvf_sym(h, "fi_strerror", "FABRIC_1.0");
	kvf_lib.version = (kvf_version_fn)kvf_sym(h, "fi_version", "FABRIC_1.0");
	if (!kvf_lib.getinfo || !kvf_lib.freeinfo || !kvf_lib.dupinfo || !kvf_lib.fabric ||
	    !kvf_lib.strerror || !kvf_lib.version) {
		snprintf(err, errlen, "%s does not export the libfabric API (fi_getinfo, fi_fabric, ...)", path);
		dlclose(h);
		memset(&kvf_lib, 0, sizeof(kvf_lib));
		return -1;
	}
	kvf_lib.handle = h;
	return 0;
}

uint32_t kvf_version(void) { return kvf_lib.version(); }

const char *kvf_strerror(int e) { return kvf_lib.strerror(e); }

void kvf_freeinfo(struct fi_info *i) { if (i) kvf_lib.freeinfo(i); }

// kvf_getinfo asks for RDM endpoints with RMA from one provider (and
// domain, when named), declaring every mr_mode bit this transport honours.
int kvf_getinfo(const char *prov, const char *domain, uint64_t mr_mode, struct fi_info **out) {
	struct fi_info *hints = kvf_lib.dupinfo(NULL);
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
	rc = kvf_lib.getinfo(FI_VERSION(1, 17), NULL, NULL, 0, hints, out);
	kvf_lib.freeinfo(hints);
	return rc;
}



static void kvf_close_fid(struct fid *f) { if (f) fi_close(f); }

void kvf_teardown(struct kvf_fab *f) {
	kvf_close_fid(f->ep ? &f->ep->fid : NULL);
	kvf_close_fid(f->av ? &f->av->fid : NULL);
	kvf_close_fid(f->cq ? &f->cq->fid : NULL);
	kvf_close_fid(f->domain ? &f->domain->fid : NULL);
	kvf_close_fid(f->fabric ? &f->fabric->fid : NULL);
	f->ep = NULL; f->av = NULL; f->cq = NULL; f->domain = NULL; f->fabric = NULL;
	free(f->ctx);
	f->ctx = NULL;
	if (f->event_fd >= 0)
		close(f->event_fd);
	f->event_fd = -1;
	f->wait_fd = -1;
	kvf_freeinfo(f->info);
	f->info = NULL;
}

// kvf_open opens fabric, domain, AV, CQ and endpoint from info (which f
// then owns). On failure it returns the libfabric code and the step.
int kvf_open(struct kvf_fab *f, struct fi_info *info, size_t nctx, int *step) {
	struct fi_av_attr av_attr;
	struct fi_cq_attr cq_attr;
	int rc;

	memset(f, 0, sizeof(*f));
	f->wait_fd = -1;
	f->event_fd = -1;
	f->info = info;
	f->nctx = nctx;
	f->ctx = calloc(nctx, sizeof(struct fi_context2));
	if (!f->ctx) { *step = KVF_STEP_MEM; rc = -FI_ENOMEM; goto fail; }
	*step = KVF_STEP_FABRIC;
	if ((rc = kvf_lib.fabric(info->fabric_attr, &f->fabric, NULL))) goto fail;
	*step = KVF_STEP_DOMAIN;
	if ((rc = fi_domain(f->fabric, info, &f->domain, NULL))) goto fail;
	*step = KVF_STEP_AV;
	memset(&av_attr, 0, sizeof(av_attr));
	av_attr.type = FI_AV_TABLE;
	if ((rc = fi_av_open(f->domain, &av_attr, &f->av, NULL))) goto fail;
	*step = KVF_STEP_MEM;
	f->event_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (f->event_fd < 0) { rc = -errno; goto fail; }
	*step = KVF_STEP_CQ;
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
	*step = KVF_STEP_EP;
	if ((rc = fi_endpoint(f->domain, info, &f->ep, NULL))) goto fail;
	*step = KVF_STEP_BIND;
	if ((rc = fi_ep_bind(f->ep, &f->av->fid, 0))) goto fail;
	if ((rc = fi_ep_bind(f->ep, &f->cq->fid, FI_TRANSMIT | FI_RECV))) goto fail;
	*step = KVF_STEP_ENABLE;
	if ((rc = fi_enable(f->ep))) goto fail;
	*step = 0;
	return 0;
fail:
	kvf_teardown(f);
	return rc;
}

int kvf_getname(struct kvf_fab *f, void *buf, size_t *len) {
	return fi_getname(&f->ep->fid, buf, len);
}

const char *kvf_straddr(struct kvf_fab *f, const void *addr, char *buf, size_t *len) {
	return fi_av_straddr(f->av, addr, buf, len);
}

int kvf_av_insert(struct kvf_fab *f, const void *addr, uint64_t *out) {
	fi_addr_t a = FI_ADDR_NOTAVAIL;
	int n = fi_av_insert(f->av, addr, 1, &a, 0, NULL);
	if (n < 0)
		return n;
	if (n != 1 || a == FI_ADDR_NOTAVAIL)
		return -FI_EADDRNOTAVAIL;
	*out = a;
	return 0;
}

int kvf_av_remove(struct kvf_fab *f, uint64_t a) {
	fi_addr_t addr = a;
	return fi_av_remove(f->av, &addr, 1, 0);
}

// kvf_mr_reg registers [addr, addr+len) for local and remote RMA, binding
// and enabling it on the endpoint when the provider wants FI_MR_ENDPOINT.
int kvf_mr_reg(struct kvf_fab *f, uintptr_t addr, size_t len, uint64_t access, uint64_t req_key, uint64_t mr_mode, struct fid_mr **out, int *bound) {
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

uint64_t kvf_mr_key(struct fid_mr *mr) { return fi_mr_key(mr); }
uintptr_t kvf_mr_desc(struct fid_mr *mr) { return (uintptr_t)fi_mr_desc(mr); }
int kvf_mr_close(struct fid_mr *mr) { return fi_close(&mr->fid); }

int kvf_mr_raw(struct fid_mr *mr, uint64_t *base, uint8_t *raw, size_t *len) {
	return fi_mr_raw_attr(mr, base, raw, len, 0);
}

int kvf_mr_map_raw(struct kvf_fab *f, uint64_t base, uint8_t *raw, size_t len, uint64_t *key) {
	return fi_mr_map_raw(f->domain, base, raw, len, key, 0);
}

int kvf_mr_unmap_key(struct kvf_fab *f, uint64_t key) {
	return fi_mr_unmap_key(f->domain, key);
}


// kvf_post posts ops in order until one fails (-FI_EAGAIN: the queue is
// full). *posted is how many went out.
ssize_t kvf_post(struct kvf_fab *f, struct kvf_op *ops, int n, int *posted) {
	int i;
	for (i = 0; i < n; i++) {
		struct kvf_op *o = &ops[i];
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


static uint32_t kvf_slot(struct kvf_fab *f, void *ctx) {
	struct fi_context2 *c = ctx;
	if (c < f->ctx || c >= f->ctx + f->nctx)
		return UINT32_MAX;
	return (uint32_t)(c - f->ctx);
}

// kvf_poll progresses the provider and reads up to max completions into
// slots. It returns the count, -FI_EAGAIN, -FI_EAVAIL with the error entry
// in e, or another negative code.
ssize_t kvf_poll(struct kvf_fab *f, uint32_t *slots, size_t max, struct kvf_cqerr *e) {
	struct fi_cq_entry ent[64];
	ssize_t n, i;
	if (max > 64)
		max = 64;
	n = fi_cq_read(f->cq, ent, max);
	if (n > 0) {
		for (i = 0; i < n; i++)
			slots[i] = kvf_slot(f, ent[i].op_context);
		return n;
	}
	if (n == -FI_EAVAIL) {
		struct fi_cq_err_entry ee;
		ssize_t r;
		memset(&ee, 0, sizeof(ee));
		r = fi_cq_readerr(f->cq, &ee, 0);
		if (r < 0)
			return r == -FI_EAGAIN ? -FI_EAGAIN : r;
		e->slot = kvf_slot(f, ee.op_context);
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

// kvf_block sleeps until the provider's wait descriptor is readable (it
// has progress to make), the event fd is written, or timeout_ns passes.
// fi_trywait first: it says whether blocking is safe. fi_cq_sread is not
// used: some providers (shm in 1.17) do not honour its timeout.
void kvf_block(struct kvf_fab *f, int64_t timeout_ns) {
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

// kvf_wake makes kvf_block return. Any thread may call it.
void kvf_wake(struct kvf_fab *f) {
	uint64_t one = 1;
	ssize_t r = write(f->event_fd, &one, sizeof(one));
	(void)r;
}

int kvf_close_ep(struct kvf_fab *f) {
	int rc = 0;
	if (f->ep) {
		rc = fi_close(&f->ep->fid);
		f->ep = NULL;
	}
	return rc;
}

// info accessors (cgo cannot reach through the union-free but nested
// attribute pointers as conveniently).
uint64_t kvf_info_mr_mode(struct fi_info *i) { return (uint64_t)i->domain_attr->mr_mode; }
size_t kvf_info_mr_key_size(struct fi_info *i) { return i->domain_attr->mr_key_size; }
size_t kvf_info_max_msg(struct fi_info *i) { return i->ep_attr->max_msg_size; }
size_t kvf_info_tx_size(struct fi_info *i) { return i->tx_attr->size; }
size_t kvf_info_inject(struct fi_info *i) { return i->tx_attr->inject_size; }
uint32_t kvf_info_addr_format(struct fi_info *i) { return i->addr_format; }
const char *kvf_info_prov(struct fi_info *i) { return i->fabric_attr->prov_name; }
const char *kvf_info_fabric(struct fi_info *i) { return i->fabric_attr->name; }
const char *kvf_info_domain(struct fi_info *i) { return i->domain_attr->name; }
int kvf_info_threading(struct fi_info *i) { return i->domain_attr->threading; }
int kvf_info_data_progress(struct fi_info *i) { return i->domain_attr->data_progress; }
struct fi_info *kvf_info_next(struct fi_info *i) { return i->next; }
struct fi_info *kvf_dupinfo(struct fi_info *i) { return kvf_lib.dupinfo(i); }
uint32_t kvf_info_prov_version(struct fi_info *i) { return i->fabric_attr->prov_version; }
