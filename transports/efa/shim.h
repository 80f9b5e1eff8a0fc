//go:build linux && cgo

/*
 * shim.h: the C side of package efa. libfabric is loaded with dlopen
 * (kvf_load), never linked, so a host without it gets a diagnosis instead
 * of a plugin the loader refuses to start; every other fi_* call is a
 * static inline of libfabric's headers, compiled in shim.c. Nothing here
 * calls into Go, and the provider never holds a Go pointer: operation
 * contexts are C memory (kvf_fab.ctx). Every kvf_* function but kvf_wake
 * must be called from the one thread that owns the kvf_fab (the domain is
 * opened FI_THREAD_DOMAIN). The prefix is kvf_, not internal/ucx's kvc_,
 * so a binary may link both.
 */
#ifndef KVF_SHIM_H
#define KVF_SHIM_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_errno.h>

// kvf_fab is one opened provider: the objects, and the contexts of posted
// operations (C memory, so the provider never holds a Go pointer).
struct kvf_fab {
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

/* Steps kvf_open can fail at. */
enum { KVF_STEP_FABRIC = 1, KVF_STEP_DOMAIN, KVF_STEP_AV, KVF_STEP_CQ, KVF_STEP_EP, KVF_STEP_BIND, KVF_STEP_ENABLE, KVF_STEP_MEM };

// kvf_op is one RMA operation to post; slot names its context.
struct kvf_op {
	uint64_t laddr, len, raddr, key, dest;
	uintptr_t desc;
	uint32_t slot, write;
};

/* kvf_cqerr is a completion error kvf_poll read. */
struct kvf_cqerr {
	uint32_t slot;
	int err;
	int prov_errno;
	char text[256];
};

int kvf_load(const char *path, char *err, size_t errlen);
uint32_t kvf_version(void);
const char *kvf_strerror(int e);
void kvf_freeinfo(struct fi_info *i);
int kvf_getinfo(const char *prov, const char *domain, uint64_t mr_mode, struct fi_info **out);
void kvf_teardown(struct kvf_fab *f);
int kvf_open(struct kvf_fab *f, struct fi_info *info, size_t nctx, int *step);
int kvf_getname(struct kvf_fab *f, void *buf, size_t *len);
const char *kvf_straddr(struct kvf_fab *f, const void *addr, char *buf, size_t *len);
int kvf_av_insert(struct kvf_fab *f, const void *addr, uint64_t *out);
int kvf_av_remove(struct kvf_fab *f, uint64_t a);
int kvf_mr_reg(struct kvf_fab *f, uintptr_t addr, size_t len, uint64_t access, uint64_t req_key, uint64_t mr_mode, struct fid_mr **out, int *bound);
uint64_t kvf_mr_key(struct fid_mr *mr);
uintptr_t kvf_mr_desc(struct fid_mr *mr);
int kvf_mr_close(struct fid_mr *mr);
int kvf_mr_raw(struct fid_mr *mr, uint64_t *base, uint8_t *raw, size_t *len);
int kvf_mr_map_raw(struct kvf_fab *f, uint64_t base, uint8_t *raw, size_t len, uint64_t *key);
int kvf_mr_unmap_key(struct kvf_fab *f, uint64_t key);
ssize_t kvf_post(struct kvf_fab *f, struct kvf_op *ops, int n, int *posted);
ssize_t kvf_poll(struct kvf_fab *f, uint32_t *slots, size_t max, struct kvf_cqerr *e);
void kvf_block(struct kvf_fab *f, int64_t timeout_ns);
void kvf_wake(struct kvf_fab *f);
int kvf_close_ep(struct kvf_fab *f);
uint64_t kvf_info_mr_mode(struct fi_info *i);
size_t kvf_info_mr_key_size(struct fi_info *i);
size_t kvf_info_max_msg(struct fi_info *i);
size_t kvf_info_tx_size(struct fi_info *i);
size_t kvf_info_inject(struct fi_info *i);
uint32_t kvf_info_addr_format(struct fi_info *i);
const char *kvf_info_prov(struct fi_info *i);
const char *kvf_info_fabric(struct fi_info *i);
const char *kvf_info_domain(struct fi_info *i);
int kvf_info_threading(struct fi_info *i);
int kvf_info_data_progress(struct fi_info *i);
struct fi_info *kvf_info_next(struct fi_info *i);
struct fi_info *kvf_dupinfo(struct fi_info *i);
uint32_t kvf_info_prov_version(struct fi_info *i);

#endif
