//go:build linux && cgo

#define _GNU_SOURCE
#include "shim.h"

#include <dlfcn.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <ucp/api/ucp.h>
#include <ucs/config/parser.h>
#include <uct/api/uct.h>

/* Every UCX function the shim uses, resolved by kvc_load. */
#define KVC_FUNCS(X)                                                          \
    X(ucp_get_version) X(ucp_config_read) X(ucp_config_release)              \
    X(ucp_config_modify) X(ucp_config_print) X(ucp_init_version) X(ucp_cleanup) \
    X(ucp_context_print_info) X(ucp_worker_create) X(ucp_worker_destroy)     \
    X(ucp_worker_get_address) X(ucp_worker_release_address)                  \
    X(ucp_worker_get_efd) X(ucp_worker_arm) X(ucp_worker_progress)           \
    X(ucp_worker_set_am_recv_handler) X(ucp_am_send_nbx) X(ucp_ep_create)    \
    X(ucp_ep_close_nbx) X(ucp_ep_print_info) X(ucp_ep_flush_nbx)             \
    X(ucp_put_nbx) X(ucp_get_nbx) X(ucp_request_free) X(ucp_mem_map)         \
    X(ucp_mem_unmap) X(ucp_rkey_pack) X(ucp_rkey_buffer_release)             \
    X(ucp_ep_rkey_unpack) X(ucp_rkey_destroy) X(ucs_status_string)           \
    X(uct_query_components) X(uct_release_component_list)                   \
    X(uct_component_query) X(uct_md_config_read) X(uct_config_release)      \
    X(uct_md_open) X(uct_md_close) X(uct_md_query_tl_resources)             \
    X(uct_release_tl_resource_list)

#define KVC_DECL(f) __typeof__(f) *f;
static struct {
    KVC_FUNCS(KVC_DECL)
} api;
static void *lib;
/* Optional: the list of every UCX configuration table (for key names). */
static __typeof__(ucs_config_parser_print_all_opts) *print_all_opts;
static ucs_list_link_t *config_tables;

typedef struct {
    kvc_worker *wk;
    uint32_t    idx;
    void       *am_buf; /* copy of an AM payload in flight */
} kvc_slot;

typedef struct kvc_msg {
    struct kvc_msg *next;
    size_t          len;
    unsigned char   data[];
} kvc_msg;

struct kvc_worker {
    ucp_context_h ctx;
    ucp_worker_h  w;
    kvc_slot     *slots;
    uint32_t      nslots;
    kvc_cmpl     *cq;
    uint32_t      ncq;
    kvc_eperr    *errs;
    uint32_t      nerrs, errs_cap;
    kvc_msg      *msg_head, *msg_tail;
    size_t        nmsgs;
    uint64_t      dropped;
};

/*
 * Loading libucs installs UCX's handlers for SIGSEGV, SIGBUS, SIGFPE and
 * SIGILL (UCX_HANDLE_ERRORS). In a Go process those signals belong to the
 * Go runtime (nil dereferences become panics), so the handlers in place
 * before dlopen are put back afterwards.
 */
int kvc_load(const char *name, char *err, size_t errlen) {
    static const int sigs[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGPIPE, SIGINT, SIGTERM, SIGQUIT, SIGHUP, SIGUSR1, SIGUSR2, SIGALRM};
    enum { NSIGS = sizeof(sigs) / sizeof(sigs[0]) };
    struct sigaction saved[NSIGS];
    int i;

    if (lib != NULL) {
        return 0;
    }
    for (i = 0; i < NSIGS; i++) {
        sigaction(sigs[i], NULL, &saved[i]);
    }
    void *h = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    for (i = 0; i < NSIGS; i++) {
        sigaction(sigs[i], &saved[i], NULL);
    }
    if (h == NULL) {
        const char *e = dlerror();
        snprintf(err, errlen, "%s", e ? e : "dlopen failed");
        return -1;
    }
#define KVC_RESOLVE(f)                                                       \
    api.f = (__typeof__(f) *)dlsym(h, #f);                                   \
    if (api.f == NULL) {                                                     \
        snprintf(err, errlen, "%s has no symbol %s", name, #f);              \
        memset(&api, 0, sizeof(api));                                        \
        dlclose(h);                                                          \
        return -2;                                                           \
    }
    KVC_FUNCS(KVC_RESOLVE)
#undef KVC_RESOLVE
    print_all_opts = (__typeof__(print_all_opts))dlsym(h, "ucs_config_parser_print_all_opts");
    config_tables = (ucs_list_link_t *)dlsym(h, "ucs_config_global_list");
    lib = h;
    return 0;
}

void kvc_version(unsigned *major, unsigned *minor, unsigned *release) {
    api.ucp_get_version(major, minor, release);
}

const char *kvc_status_string(int status) {
    return api.ucs_status_string((ucs_status_t)status);
}

int kvc_query_resources(kvc_resource *out, int max, int *total) {
    uct_component_h *comps;
    unsigned ncomps, c, m, r;
    int n = 0;
    ucs_status_t st = api.uct_query_components(&comps, &ncomps);
    if (st != UCS_OK) {
        return st;
    }
    for (c = 0; c < ncomps; c++) {
        uct_component_attr_t attr = {.field_mask = UCT_COMPONENT_ATTR_FIELD_NAME |
                                                   UCT_COMPONENT_ATTR_FIELD_MD_RESOURCE_COUNT};
        if (api.uct_component_query(comps[c], &attr) != UCS_OK || attr.md_resource_count == 0) {
            continue;
        }
        uct_md_resource_desc_t *mds = calloc(attr.md_resource_count, sizeof(*mds));
        if (mds == NULL) {
            continue;
        }
        attr.field_mask = UCT_COMPONENT_ATTR_FIELD_MD_RESOURCES;
        attr.md_resources = mds;
        if (api.uct_component_query(comps[c], &attr) != UCS_OK) {
            free(mds);
            continue;
        }
        for (m = 0; m < attr.md_resource_count; m++) {
            uct_md_config_t *cfg;
            uct_md_h md;
            uct_tl_resource_desc_t *res;
            unsigned nres;
            if (api.uct_md_config_read(comps[c], NULL, NULL, &cfg) != UCS_OK) {
                continue;
            }
            st = api.uct_md_open(comps[c], mds[m].md_name, cfg, &md);
            api.uct_config_release(cfg);
            if (st != UCS_OK) {
                continue;
            }
            if (api.uct_md_query_tl_resources(md, &res, &nres) == UCS_OK) {
                for (r = 0; r < nres; r++, n++) {
                    if (n >= max) {
                        continue;
                    }
                    snprintf(out[n].component, sizeof(out[n].component), "%s", attr.name);
                    snprintf(out[n].md, sizeof(out[n].md), "%s", mds[m].md_name);
                    snprintf(out[n].tl, sizeof(out[n].tl), "%s", res[r].tl_name);
                    snprintf(out[n].dev, sizeof(out[n].dev), "%s", res[r].dev_name);
                    out[n].dev_type = (int)res[r].dev_type;
                }
                api.uct_release_tl_resource_list(res);
            }
            api.uct_md_close(md);
        }
        free(mds);
    }
    api.uct_release_component_list(comps);
    *total = n;
    return UCS_OK;
}

static void kvc_push_cmpl(kvc_worker *wk, uint32_t slot, ucs_status_t st) {
    if (wk->ncq < wk->nslots) { /* always true: a slot completes once per use */
        wk->cq[wk->ncq].slot = slot;
        wk->cq[wk->ncq].status = (int32_t)st;
        wk->ncq++;
    }
}

static void kvc_send_cb(void *request, ucs_status_t status, void *user_data) {
    kvc_slot *s = user_data;
    free(s->am_buf);
    s->am_buf = NULL;
    kvc_push_cmpl(s->wk, s->idx, status);
    api.ucp_request_free(request);
}

static void kvc_ep_err_cb(void *arg, ucp_ep_h ep, ucs_status_t status) {
    kvc_worker *wk = arg;
    if (wk->nerrs == wk->errs_cap) {
        uint32_t cap = wk->errs_cap ? 2 * wk->errs_cap : 16;
        kvc_eperr *e = realloc(wk->errs, cap * sizeof(*e));
        if (e == NULL) {
            return;
        }
        wk->errs = e;
        wk->errs_cap = cap;
    }
    wk->errs[wk->nerrs].ep = (uintptr_t)ep;
    wk->errs[wk->nerrs].status = (int32_t)status;
    wk->nerrs++;
}

static ucs_status_t kvc_am_cb(void *arg, const void *header, size_t header_length,
                              void *data, size_t length, const ucp_am_recv_param_t *param) {
    kvc_worker *wk = arg;
    (void)header;
    (void)header_length;
    if ((param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) || length > KVC_MAX_MSG ||
        wk->nmsgs >= KVC_MAX_QUEUED_MSGS) {
        wk->dropped++;
        return UCS_OK; /* a rendezvous message not received is dropped */
    }
    kvc_msg *m = malloc(sizeof(*m) + length);
    if (m == NULL) {
        wk->dropped++;
        return UCS_OK;
    }
    m->next = NULL;
    m->len = length;
    memcpy(m->data, data, length);
    if (wk->msg_tail) {
        wk->msg_tail->next = m;
    } else {
        wk->msg_head = m;
    }
    wk->msg_tail = m;
    wk->nmsgs++;
    return UCS_OK;
}

int kvc_worker_create(const char *tls, const char *net_devices,
                      const char **extra_kv, int n_extra, int thread_mode,
                      uint32_t nslots, kvc_worker **out, int *step) {
    ucp_config_t *cfg;
    ucs_status_t st;
    uint32_t i;
    kvc_worker *wk = calloc(1, sizeof(*wk));
    if (wk == NULL) {
        *step = KVC_STEP_CONFIG_READ;
        return UCS_ERR_NO_MEMORY;
    }
    wk->slots = calloc(nslots, sizeof(*wk->slots));
    wk->cq = calloc(nslots, sizeof(*wk->cq));
    if (wk->slots == NULL || wk->cq == NULL) {
        free(wk->slots);
        free(wk->cq);
        free(wk);
        *step = KVC_STEP_CONFIG_READ;
        return UCS_ERR_NO_MEMORY;
    }
    wk->nslots = nslots;
    for (i = 0; i < nslots; i++) {
        wk->slots[i].wk = wk;
        wk->slots[i].idx = i;
    }

    *step = KVC_STEP_CONFIG_READ;
    st = api.ucp_config_read(NULL, NULL, &cfg);
    if (st != UCS_OK) {
        goto fail;
    }
    if (tls != NULL && tls[0] != '\0') {
        *step = KVC_STEP_CONFIG_TLS;
        st = api.ucp_config_modify(cfg, "TLS", tls);
    }
    if (st == UCS_OK && net_devices != NULL && net_devices[0] != '\0') {
        *step = KVC_STEP_CONFIG_NETDEV;
        st = api.ucp_config_modify(cfg, "NET_DEVICES", net_devices);
    }
    for (int k = 0; st == UCS_OK && k + 1 < 2 * n_extra; k += 2) {
        *step = KVC_STEP_CONFIG_EXTRA;
        st = api.ucp_config_modify(cfg, extra_kv[k], extra_kv[k + 1]);
    }
    if (st != UCS_OK) {
        api.ucp_config_release(cfg);
        goto fail;
    }
    ucp_params_t params = {
        .field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED |
                      UCP_PARAM_FIELD_NAME,
        .features = UCP_FEATURE_RMA | UCP_FEATURE_AM | UCP_FEATURE_WAKEUP,
        .mt_workers_shared = thread_mode != UCS_THREAD_MODE_SINGLE,
        .name = "kvconnect",
    };
    *step = KVC_STEP_INIT;
    st = api.ucp_init_version(UCP_API_MAJOR, UCP_API_MINOR, &params, cfg, &wk->ctx);
    api.ucp_config_release(cfg);
    if (st != UCS_OK) {
        goto fail;
    }
    ucp_worker_params_t wp = {
        .field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
        .thread_mode = (ucs_thread_mode_t)thread_mode,
    };
    *step = KVC_STEP_WORKER;
    st = api.ucp_worker_create(wk->ctx, &wp, &wk->w);
    if (st != UCS_OK) {
        api.ucp_cleanup(wk->ctx);
        goto fail;
    }
    ucp_am_handler_param_t ap = {
        .field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_FLAGS |
                      UCP_AM_HANDLER_PARAM_FIELD_CB | UCP_AM_HANDLER_PARAM_FIELD_ARG,
        .id = KVC_AM_ID,
        .flags = UCP_AM_FLAG_WHOLE_MSG,
        .cb = kvc_am_cb,
        .arg = wk,
    };
    *step = KVC_STEP_AM_HANDLER;
    st = api.ucp_worker_set_am_recv_handler(wk->w, &ap);
    if (st != UCS_OK) {
        api.ucp_worker_destroy(wk->w);
        api.ucp_cleanup(wk->ctx);
        goto fail;
    }
    *out = wk;
    *step = 0;
    return UCS_OK;
fail:
    free(wk->slots);
    free(wk->cq);
    free(wk);
    return st;
}

void kvc_worker_destroy(kvc_worker *wk) {
    uint32_t i;
    api.ucp_worker_destroy(wk->w);
    api.ucp_cleanup(wk->ctx);
    for (i = 0; i < wk->nslots; i++) {
        free(wk->slots[i].am_buf);
    }
    while (wk->msg_head) {
        kvc_msg *m = wk->msg_head;
        wk->msg_head = m->next;
        free(m);
    }
    free(wk->errs);
    free(wk->slots);
    free(wk->cq);
    free(wk);
}

int kvc_worker_address(kvc_worker *wk, void **buf, size_t *len) {
    ucp_address_t *a;
    ucs_status_t st = api.ucp_worker_get_address(wk->w, &a, len);
    *buf = a;
    return st;
}

void kvc_worker_address_release(kvc_worker *wk, void *buf) {
    api.ucp_worker_release_address(wk->w, buf);
}

int kvc_worker_efd(kvc_worker *wk, int *fd) {
    return api.ucp_worker_get_efd(wk->w, fd);
}

int kvc_worker_arm(kvc_worker *wk) {
    return api.ucp_worker_arm(wk->w);
}

unsigned kvc_progress(kvc_worker *wk, unsigned max_rounds) {
    unsigned total = 0, r, n;
    for (r = 0; r < max_rounds; r++) {
        n = api.ucp_worker_progress(wk->w);
        if (n == 0) {
            break;
        }
        total += n;
    }
    return total;
}

static char *kvc_capture(void (*print)(void *, FILE *), void *obj, size_t *len) {
    char *buf = NULL;
    FILE *f = open_memstream(&buf, len);
    if (f == NULL) {
        return NULL;
    }
    print(obj, f);
    fclose(f);
    return buf;
}

static void kvc_print_context(void *obj, FILE *f) {
    api.ucp_context_print_info(((kvc_worker *)obj)->ctx, f);
}

static void kvc_print_ep(void *obj, FILE *f) {
    api.ucp_ep_print_info((ucp_ep_h)obj, f);
}

static void kvc_print_config(void *obj, FILE *f) {
    (void)obj;
    print_all_opts(f, "UCX_", UCS_CONFIG_PRINT_CONFIG | UCS_CONFIG_PRINT_HIDDEN, config_tables);
}

char *kvc_config_dump(size_t *len) {
    if (print_all_opts == NULL || config_tables == NULL) {
        return NULL;
    }
    return kvc_capture(kvc_print_config, NULL, len);
}

static void kvc_print_ucp_config(void *obj, FILE *f) {
    api.ucp_config_print((const ucp_config_t *)obj, f, NULL, UCS_CONFIG_PRINT_CONFIG | UCS_CONFIG_PRINT_HIDDEN);
}

char *kvc_ucp_config_dump(size_t *len) {
    ucp_config_t *cfg;
    if (api.ucp_config_read(NULL, NULL, &cfg) != UCS_OK) {
        return NULL;
    }
    char *s = kvc_capture(kvc_print_ucp_config, cfg, len);
    api.ucp_config_release(cfg);
    return s;
}

char *kvc_context_info(kvc_worker *wk, size_t *len) {
    return kvc_capture(kvc_print_context, wk, len);
}

char *kvc_ep_info(uintptr_t ep, size_t *len) {
    return kvc_capture(kvc_print_ep, (void *)ep, len);
}

uint32_t kvc_drain_completions(kvc_worker *wk, kvc_cmpl *out, uint32_t max) {
    uint32_t n = wk->ncq < max ? wk->ncq : max;
    memcpy(out, wk->cq, n * sizeof(*out));
    memmove(wk->cq, wk->cq + n, (wk->ncq - n) * sizeof(*out));
    wk->ncq -= n;
    return n;
}

uint32_t kvc_drain_ep_errors(kvc_worker *wk, kvc_eperr *out, uint32_t max) {
    uint32_t n = wk->nerrs < max ? wk->nerrs : max;
    memcpy(out, wk->errs, n * sizeof(*out));
    memmove(wk->errs, wk->errs + n, (wk->nerrs - n) * sizeof(*out));
    wk->nerrs -= n;
    return n;
}

long kvc_next_msg(kvc_worker *wk, void *out, size_t cap) {
    kvc_msg *m = wk->msg_head;
    long n;
    if (m == NULL) {
        return -1;
    }
    wk->msg_head = m->next;
    if (wk->msg_head == NULL) {
        wk->msg_tail = NULL;
    }
    wk->nmsgs--;
    n = (long)(m->len < cap ? m->len : cap);
    memcpy(out, m->data, (size_t)n);
    free(m);
    return n;
}

uint64_t kvc_dropped_msgs(kvc_worker *wk) {
    return wk->dropped;
}

int kvc_ep_create(kvc_worker *wk, const void *addr, size_t len, int peer_errors, uintptr_t *ep) {
    ucp_ep_h e;
    (void)len;
    ucp_ep_params_t p = {
        .field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE,
        .address = addr,
        .err_mode = peer_errors ? UCP_ERR_HANDLING_MODE_PEER : UCP_ERR_HANDLING_MODE_NONE,
    };
    if (peer_errors) {
        p.field_mask |= UCP_EP_PARAM_FIELD_ERR_HANDLER;
        p.err_handler.cb = kvc_ep_err_cb;
        p.err_handler.arg = wk;
    }
    ucs_status_t st = api.ucp_ep_create(wk->w, &p, &e);
    *ep = (uintptr_t)e;
    return st;
}

static ucp_request_param_t kvc_param(kvc_worker *wk, uint32_t slot) {
    ucp_request_param_t p = {
        .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA,
        .cb.send = kvc_send_cb,
        .user_data = &wk->slots[slot],
    };
    return p;
}

static int kvc_status(ucs_status_ptr_t r) {
    if (r == NULL) {
        return UCS_OK;
    }
    if (UCS_PTR_IS_ERR(r)) {
        return UCS_PTR_STATUS(r);
    }
    return UCS_INPROGRESS;
}

int kvc_ep_close(kvc_worker *wk, uint32_t slot, uintptr_t ep, int force) {
    if (slot >= wk->nslots) {
        return UCS_ERR_INVALID_PARAM;
    }
    ucp_request_param_t p = kvc_param(wk, slot);
    if (force) {
        p.op_attr_mask |= UCP_OP_ATTR_FIELD_FLAGS;
        p.flags = UCP_EP_CLOSE_FLAG_FORCE;
    }
    return kvc_status(api.ucp_ep_close_nbx((ucp_ep_h)ep, &p));
}

int kvc_am_send(kvc_worker *wk, uint32_t slot, uintptr_t ep, const void *buf, size_t len) {
    if (slot >= wk->nslots) {
        return UCS_ERR_INVALID_PARAM;
    }
    kvc_slot *s = &wk->slots[slot];
    void *copy = malloc(len ? len : 1);
    if (copy == NULL) {
        return UCS_ERR_NO_MEMORY;
    }
    memcpy(copy, buf, len);
    ucp_request_param_t p = kvc_param(wk, slot);
    p.op_attr_mask |= UCP_OP_ATTR_FIELD_FLAGS;
    p.flags = UCP_AM_SEND_FLAG_EAGER;
    free(s->am_buf);
    s->am_buf = copy;
    int st = kvc_status(api.ucp_am_send_nbx((ucp_ep_h)ep, KVC_AM_ID, NULL, 0, copy, len, &p));
    if (st != UCS_INPROGRESS) {
        free(s->am_buf);
        s->am_buf = NULL;
    }
    return st;
}

void kvc_post(kvc_worker *wk, kvc_op *ops, size_t n) {
    size_t i;
    for (i = 0; i < n; i++) {
        kvc_op *o = &ops[i];
        if (o->slot >= wk->nslots) {
            o->status = UCS_ERR_INVALID_PARAM;
            continue;
        }
        ucp_request_param_t p = kvc_param(wk, o->slot);
        ucs_status_ptr_t r;
        switch (o->kind) {
        case KVC_PUT:
            r = api.ucp_put_nbx((ucp_ep_h)o->ep, (void *)o->laddr, o->len, o->raddr,
                                (ucp_rkey_h)o->rkey, &p);
            break;
        case KVC_GET:
            r = api.ucp_get_nbx((ucp_ep_h)o->ep, (void *)o->laddr, o->len, o->raddr,
                                (ucp_rkey_h)o->rkey, &p);
            break;
        case KVC_FLUSH:
            r = api.ucp_ep_flush_nbx((ucp_ep_h)o->ep, &p);
            break;
        default:
            o->status = UCS_ERR_INVALID_PARAM;
            continue;
        }
        o->status = kvc_status(r);
    }
}

int kvc_mem_map(kvc_worker *wk, uintptr_t addr, uint64_t len, uintptr_t *memh) {
    ucp_mem_h m;
    ucp_mem_map_params_t p = {
        .field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH,
        .address = (void *)addr,
        .length = len,
    };
    ucs_status_t st = api.ucp_mem_map(wk->ctx, &p, &m);
    *memh = (uintptr_t)m;
    return st;
}

int kvc_mem_unmap(kvc_worker *wk, uintptr_t memh) {
    return api.ucp_mem_unmap(wk->ctx, (ucp_mem_h)memh);
}

int kvc_rkey_pack(kvc_worker *wk, uintptr_t memh, void **buf, size_t *len) {
    return api.ucp_rkey_pack(wk->ctx, (ucp_mem_h)memh, buf, len);
}

void kvc_rkey_buffer_release(void *buf) {
    api.ucp_rkey_buffer_release(buf);
}

int kvc_rkey_unpack(uintptr_t ep, const void *buf, uintptr_t *rkey) {
    ucp_rkey_h k;
    ucs_status_t st = api.ucp_ep_rkey_unpack((ucp_ep_h)ep, buf, &k);
    *rkey = (uintptr_t)k;
    return st;
}

void kvc_rkey_destroy(uintptr_t rkey) {
    api.ucp_rkey_destroy((ucp_rkey_h)rkey);
}
