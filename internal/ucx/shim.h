//go:build linux && cgo

/*
 * shim.h: the C side of package ucx. UCX is loaded with dlopen (so a host
 * without libucp gets a diagnosis instead of a loader failure) and every
 * UCX call goes through the function table filled by kvc_load.
 *
 * Nothing here calls into Go: completions, received active messages and
 * endpoint failures are queued in C on the kvc_worker and drained by the
 * Go progress loop after each progress call. All kvc_worker functions must
 * be called from the one thread that owns the worker.
 */
#ifndef KVC_SHIM_H
#define KVC_SHIM_H

#include <stddef.h>
#include <stdint.h>

/* Op kinds for kvc_post. */
enum {
    KVC_PUT   = 1,
    KVC_GET   = 2,
    KVC_FLUSH = 3
};

/* Steps kvc_worker_create can fail at. */
enum {
    KVC_STEP_CONFIG_READ   = 1,
    KVC_STEP_CONFIG_TLS    = 2,
    KVC_STEP_CONFIG_NETDEV = 3,
    KVC_STEP_INIT          = 4,
    KVC_STEP_WORKER        = 5,
    KVC_STEP_AM_HANDLER    = 6,
    KVC_STEP_EFD           = 7,
    KVC_STEP_CONFIG_EXTRA  = 8
};

/* The AM id kvconnect's control messages use. */
#define KVC_AM_ID 7
/* Larger control messages are dropped on receipt. */
#define KVC_MAX_MSG (64 * 1024)
/* At most this many received messages wait for the Go side. */
#define KVC_MAX_QUEUED_MSGS 65536

typedef struct kvc_worker kvc_worker;

/* One op for kvc_post. status is set by kvc_post: 0 (UCS_OK) when the op
 * completed immediately, 1 (UCS_INPROGRESS) when its completion will be
 * queued for its slot, or a negative ucs_status_t. */
typedef struct {
    uint32_t  kind;
    uint32_t  slot;
    uintptr_t ep;
    uintptr_t laddr;
    uint64_t  raddr;
    uintptr_t rkey;
    uint64_t  len;
    int32_t   status;
    int32_t   pad;
} kvc_op;

typedef struct {
    uint32_t slot;
    int32_t  status;
} kvc_cmpl;

typedef struct {
    uintptr_t ep;
    int32_t   status;
    int32_t   pad;
} kvc_eperr;

typedef struct {
    char component[32];
    char md[32];
    char tl[32];
    char dev[64];
    int  dev_type;
} kvc_resource;

int kvc_load(const char *name, char *err, size_t errlen);
void kvc_version(unsigned *major, unsigned *minor, unsigned *release);
const char *kvc_status_string(int status);

int kvc_query_resources(kvc_resource *out, int max, int *total);

int kvc_worker_create(const char *tls, const char *net_devices,
                      const char **extra_kv, int n_extra, int thread_mode,
                      uint32_t nslots, kvc_worker **out, int *step);
void kvc_worker_destroy(kvc_worker *wk);
int kvc_worker_address(kvc_worker *wk, void **buf, size_t *len);
void kvc_worker_address_release(kvc_worker *wk, void *buf);
int kvc_worker_efd(kvc_worker *wk, int *fd);
int kvc_worker_arm(kvc_worker *wk);
unsigned kvc_progress(kvc_worker *wk, unsigned max_rounds);
char *kvc_context_info(kvc_worker *wk, size_t *len);
/* Every UCX configuration variable as "UCX_NAME=value" lines (what
 * `ucx_info -c` prints), or NULL when the library does not export it. */
char *kvc_config_dump(size_t *len);
/* The UCP-level variables only (ucp_config_print). */
char *kvc_ucp_config_dump(size_t *len);
char *kvc_ep_info(uintptr_t ep, size_t *len);

uint32_t kvc_drain_completions(kvc_worker *wk, kvc_cmpl *out, uint32_t max);
uint32_t kvc_drain_ep_errors(kvc_worker *wk, kvc_eperr *out, uint32_t max);
/* Pops the oldest received message into out (up to cap bytes); returns its
 * length, or -1 when there is none. */
long kvc_next_msg(kvc_worker *wk, void *out, size_t cap);
uint64_t kvc_dropped_msgs(kvc_worker *wk);

int kvc_ep_create(kvc_worker *wk, const void *addr, size_t len, int peer_errors, uintptr_t *ep);
int kvc_ep_close(kvc_worker *wk, uint32_t slot, uintptr_t ep, int force);
int kvc_am_send(kvc_worker *wk, uint32_t slot, uintptr_t ep, const void *buf, size_t len);
void kvc_post(kvc_worker *wk, kvc_op *ops, size_t n);

int kvc_mem_map(kvc_worker *wk, uintptr_t addr, uint64_t len, uintptr_t *memh);
int kvc_mem_unmap(kvc_worker *wk, uintptr_t memh);
int kvc_rkey_pack(kvc_worker *wk, uintptr_t memh, void **buf, size_t *len);
void kvc_rkey_buffer_release(void *buf);
int kvc_rkey_unpack(uintptr_t ep, const void *buf, uintptr_t *rkey);
void kvc_rkey_destroy(uintptr_t rkey);

#endif
