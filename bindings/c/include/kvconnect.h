/*
 * kvconnect.h: the C API of libkvconnect.so, kvconnect's KV-cache transfer
 * engine (https://github.com/kvconnect/kvconnect, docs/C-API.md).
 *
 * An engine is a kvconnect node: it registers memory, publishes it to peers
 * (by session id "host:port", or through a metadata service), and moves
 * bytes between its memory and peers' memory by absolute addresses, the way
 * Mooncake's Transfer Engine does, over the best transport that starts here
 * (rdma, then the documented fallback chain down to tcp). When a transport
 * cannot start, the engine says exactly why (kvc_last_error_json).
 *
 * Rules that hold for every function:
 *   - No Go type crosses this interface: handles are integers, strings are
 *     NUL-terminated UTF-8, memory is addresses and lengths.
 *   - Every function is safe to call from any thread, concurrently.
 *   - No function blocks past its timeout: a timeout_ms argument where there
 *     is one (< 0 means the engine's transfer_timeout setting, Mooncake's
 *     MC_TRANSFER_TIMEOUT, plus 1 ns per byte moved), else the engine's
 *     configured timeouts (plugin_start_timeout, connect_timeout,
 *     transfer_timeout).
 *   - Errors: a negative return code (KVC_ERR_*, Mooncake's codes where one
 *     fits), or 0 for functions returning an id or an address. The calling
 *     thread's last error (text and structured JSON) says what happened; it
 *     is left alone by calls that succeed (like errno).
 *   - Strings returned as char * were allocated by the library: release
 *     them with kvc_free.
 *   - After fork(), the library cannot run in the child: every call there
 *     fails with KVC_ERR_FORKED (memory registered in the parent stays
 *     private to each process). Start engines after forking.
 */
#ifndef KVCONNECT_H
#define KVCONNECT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define KVCONNECT_C_API_VERSION 1

/* Return codes. 0 is success. Mooncake's codes where one fits: */
#define KVC_OK 0
#define KVC_ERR_INVALID_ARGUMENT (-1)       /* bad input; also a generic failure */
#define KVC_ERR_TOO_MANY_REQUESTS (-2)      /* a batch over the op limit */
#define KVC_ERR_ADDRESS_NOT_REGISTERED (-3) /* local or remote range outside registered memory */
#define KVC_ERR_ADDRESS_OVERLAPPED (-7)     /* memory overlaps a registered region */
#define KVC_ERR_DNS (-101)                  /* a host name did not resolve */
#define KVC_ERR_SOCKET (-102)               /* a peer could not be reached */
#define KVC_ERR_REJECT_HANDSHAKE (-104)     /* a peer refused us (authentication) */
#define KVC_ERR_METADATA (-200)             /* the metadata service failed or lacks the peer */
#define KVC_ERR_NOT_IMPLEMENTED (-303)      /* not supported here */
/* kvconnect's own: */
#define KVC_ERR_TIMEOUT (-1001)              /* the call's timeout ended it */
#define KVC_ERR_CLOSED (-1002)               /* the engine is closed */
#define KVC_ERR_NOT_INITIALIZED (-1003)      /* kvc_engine_initialize has not succeeded */
#define KVC_ERR_UNAVAILABLE (-1004)          /* no transport could start (see the diagnosis) */
#define KVC_ERR_FORKED (-1005)               /* called in a child forked after the library started */
#define KVC_ERR_NO_COMMON_TRANSPORT (-1006)  /* the peer runs none of our transports */
#define KVC_ERR_UNKNOWN_BATCH (-1007)        /* no such batch id (never submitted, or freed) */
#define KVC_ERR_INTERNAL (-1099)             /* a bug: please report the last error */

/* Op kinds, as Mooncake's TransferOpcode. */
#define KVC_OP_READ 0  /* remote -> local */
#define KVC_OP_WRITE 1 /* local -> remote */

/* Per-op status (kvc_batch_wait's statuses). */
#define KVC_STATUS_PENDING 0
#define KVC_STATUS_COMPLETED 1
#define KVC_STATUS_FAILED 2
#define KVC_STATUS_TIMEOUT 3
#define KVC_STATUS_CANCELED 4

/* kvc_batch_wait's result, as Mooncake's transfer_check_status. */
#define KVC_BATCH_DONE 1     /* every op completed */
#define KVC_BATCH_PENDING 0  /* still running when the timeout ended */
#define KVC_BATCH_FAILED (-1) /* ended; an op failed */
#define KVC_BATCH_TIMEDOUT (-2) /* ended; an op timed out */

typedef uint64_t kvc_engine; /* 0 is never a valid engine */
typedef uint64_t kvc_batch;  /* 0 is never a valid batch */

/* The library's version, e.g. "0.6.0 (abc1234)". Static: do not free. */
const char *kvc_version(void);

/* The calling thread's last error as text, "" if none. Valid until the
 * thread's next call into the library. */
const char *kvc_last_error(void);
/* The same error as JSON: {"code":-1,"kind":"invalid_argument","message":..}
 * plus, when initialization failed, "attempts": one per transport tried,
 * each with its diagnosis (step, native code, cause, hints). "{}" if none. */
const char *kvc_last_error_json(void);

/* Releases a string the library returned. NULL is fine. */
void kvc_free(void *p);

/* ---- Engines ---------------------------------------------------------- */

/* A new, uninitialized engine. Starts nothing. Returns 0 only when the
 * library cannot run (forked child). */
kvc_engine kvc_engine_new(void);

/* Settings for the next kvc_engine_initialize, as a JSON object of kvconnect
 * configuration keys (docs/CONFIG.md), e.g. {"plugin_dir": "/opt/kvc/bin"}.
 * They sit just above the defaults: a config file ($KVCONNECT_CONFIG) and
 * the environment (KVCONNECT_*, MOONCAKE_*, MC_*) override them. */
int kvc_engine_set_defaults(kvc_engine e, const char *json);

/* Starts the engine, as Mooncake's initialize(local_hostname, metadata,
 * protocol, device_name):
 *   local_hostname  "ip", "ip:port" or Ascend's "ip:port:npu_N" (NULL or ""
 *                   = this host's outward address);
 *   metadata        "P2PHANDSHAKE" (NULL or ""), "etcd://host:port",
 *                   "host:port" (etcd), "http://host:port/path",
 *                   "redis://host:port";
 *   protocol        the transport to try first (NULL or "" = "rdma"); the
 *                   fallback chain follows unless strict (fallback: []);
 *   device_name     "" (auto), "mlx5_0,mlx5_1", or a per-device JSON map.
 * These are the program's defaults: the config file and environment
 * override them as for `kvconnect serve`. In P2P mode the RPC port is a free
 * port in MC_MIN_RPC_PORT..MC_MAX_RPC_PORT (15000-17000) and the session id
 * is host:port; with a metadata service the segment is published under
 * local_hostname. Returns 0 when a transport is up (after a fallback too:
 * kvc_engine_status_json says which and why), KVC_ERR_UNAVAILABLE with the
 * full diagnosis in the last error when none could start. May be called
 * again after a failure. */
int kvc_engine_initialize(kvc_engine e, const char *local_hostname, const char *metadata,
                          const char *protocol, const char *device_name);

/* kvc_engine_initialize with Mooncake's initialize_ext metadata_type: the
 * service a bare "host:port" metadata argument names ("etcd", "http",
 * "redis"; NULL or "" = etcd). */
int kvc_engine_initialize_ext(kvc_engine e, const char *local_hostname, const char *metadata,
                              const char *protocol, const char *device_name, const char *metadata_type);

/* kvc_engine_initialize_ext without its re-read of the process environment:
 * the engine starts with the environment as the library last read it (when
 * it loaded, at the last kvc_sync_environ, or at another engine's
 * kvc_engine_initialize or _ext, which re-read it). For a caller that can keep
 * other threads from changing the environment only briefly, as a language
 * runtime with a global lock: sync under that lock, then start without it,
 * so the caller's other threads run while the engine starts (plugins, the
 * fallback chain, the metadata service, which may be served by one of
 * them). metadata_type may be NULL. */
int kvc_engine_initialize_synced(kvc_engine e, const char *local_hostname, const char *metadata,
                                 const char *protocol, const char *device_name, const char *metadata_type);

/* Stops the engine: work in flight fails, plugin processes end, registered
 * memory goes back to the caller as it was, managed memory is unmapped.
 * Idempotent (closing again returns 0); calls with the handle afterwards
 * return KVC_ERR_CLOSED (handles are never reused). */
int kvc_engine_close(kvc_engine e);

/* The engine's RPC (handshake) port, or a negative code. */
int kvc_engine_rpc_port(kvc_engine e);

/* The engine's session id ("host:port", or its segment name with a metadata
 * service), or NULL. Free with kvc_free. */
char *kvc_engine_session_id(kvc_engine e);

/* The engine's status as JSON: transports up, the chain's attempts with
 * their diagnoses, "fallback": true when the protocol asked for is not the
 * one running, plugin pids, regions, peers. Free with kvc_free. */
char *kvc_engine_status_json(kvc_engine e);

/* ---- Memory ----------------------------------------------------------- */

/* Registers memory the caller owns, in place: any mapped, writable range of
 * this process (malloc'd, mmap'd, a Python or numpy buffer). Peers address
 * it by its own address. The memory must stay alive until unregistered.
 * Private memory is moved, in place, into shared memory so a transport
 * plugin process can reach it without copies (docs/C-API.md explains the
 * page rule: the first and last page may hold other data, copied along).
 * Moving replaces the pages: register memory before another driver pins it
 * for DMA (cudaHostRegister, ibv_reg_mr), which would keep the old pages.
 * Overlap with a registered range: KVC_ERR_ADDRESS_OVERLAPPED. */
int kvc_register_memory(kvc_engine e, uint64_t addr, uint64_t length);
/* Registers n ranges at once, all or none, one round trip per transport. */
int kvc_register_memory_batch(kvc_engine e, const uint64_t *addrs, const uint64_t *lengths, size_t n);
/* Unregisters the range registered at addr (its first byte): ops on it end
 * first (bounded by transfer_timeout); then no peer reaches it and it is
 * ordinary memory again, contents kept. Unknown: KVC_ERR_ADDRESS_NOT_REGISTERED. */
int kvc_unregister_memory(kvc_engine e, uint64_t addr);
int kvc_unregister_memory_batch(kvc_engine e, const uint64_t *addrs, size_t n);

/* Allocates length bytes of shared memory, registered; returns its address,
 * or 0. kvc_free_managed releases it (by its address). */
uint64_t kvc_allocate_managed(kvc_engine e, uint64_t length);
int kvc_free_managed(kvc_engine e, uint64_t addr);

/* ---- Peers ------------------------------------------------------------ */

/* Opens (and caches) a peer by session id: fetches its segment and connects
 * a transport both sides run. Transfers open peers on first use; this lets
 * a caller do it ahead and see errors early. */
int kvc_open_segment(kvc_engine e, const char *session, int64_t timeout_ms);
/* The address of the first buffer the peer published, or 0. */
uint64_t kvc_segment_first_buffer(kvc_engine e, const char *session, int64_t timeout_ms);
/* Asks the peer's node whether it is alive: 0, or a negative code. */
int kvc_probe(kvc_engine e, const char *session, int64_t timeout_ms);
/* Sends a small message to the peer's node (Mooncake's notify). */
int kvc_notify(kvc_engine e, const char *session, const char *name, const char *msg, int64_t timeout_ms);
/* Messages peers sent, as a JSON array of {"name","msg","from"}; they are
 * removed from the engine. NULL on error. Free with kvc_free. */
char *kvc_get_notifies(kvc_engine e);

/* ---- Transfers -------------------------------------------------------- */

/* Moves n ranges between local addresses (in registered memory) and the
 * peer's addresses, all of kind op, and waits: 0 when every op completed,
 * else the first failure's code. */
int kvc_transfer_sync(kvc_engine e, const char *session, int op, const uint64_t *local,
                      const uint64_t *remote, const uint64_t *lengths, size_t n, int64_t timeout_ms);

/* Starts the same batch and returns its id at once, or 0 (bad input, an
 * unknown or unreachable peer: see the last error). timeout_ms bounds the
 * batch itself. */
kvc_batch kvc_batch_submit(kvc_engine e, const char *session, int op, const uint64_t *local,
                           const uint64_t *remote, const uint64_t *lengths, size_t n, int64_t timeout_ms);
/* Waits up to timeout_ms (0 = poll, < 0 = transfer_timeout) for the batch
 * and returns KVC_BATCH_* once it ended or the wait did (a batch that
 * failed as a whole, every op completed, is KVC_BATCH_FAILED); statuses
 * (n entries, may be NULL) receives each op's KVC_STATUS_*. A failed
 * batch's first error becomes the last error. A batch it cannot look at
 * gives a KVC_ERR_* below -1000, never confused with an outcome:
 * KVC_ERR_UNKNOWN_BATCH (also for an engine handle never given out),
 * KVC_ERR_CLOSED. */
int kvc_batch_wait(kvc_engine e, kvc_batch b, int64_t timeout_ms, int32_t *statuses, size_t n);
/* Forgets a batch. A batch still running is canceled first: this returns
 * once the transport is done with it (its ops that had not completed end
 * with KVC_STATUS_CANCELED; a transport plugin that does not report the
 * canceled batch holds this call at most 5 s). Closing the engine
 * cancels and forgets every batch: both calls then return KVC_ERR_CLOSED,
 * also while kvc_engine_close is still running. */
int kvc_batch_free(kvc_engine e, kvc_batch b);

/* ---- Host ------------------------------------------------------------- */

/* What the transports see on this host, as JSON: for each transport of the
 * catalog, whether it would start here with the engine's settings (its
 * defaults, the config file, the environment) and, if not, its diagnosis
 * (what `kvconnect doctor --json` prints). device_name may be NULL. Works
 * before kvc_engine_initialize. Free with kvc_free. */
char *kvc_engine_topology(kvc_engine e, const char *device_name);

/* Re-reads the process environment. The library reads it when it loads;
 * kvc_engine_initialize re-reads it too, so variables set (setenv) before
 * initialize apply. Call this after changing the environment while other
 * threads may be inside the library, from the thread that changed it, and
 * before kvc_engine_initialize_synced. It walks environ: no other thread may
 * call setenv, putenv or unsetenv meanwhile. */
int kvc_sync_environ(void);

#ifdef __cplusplus
}
#endif

#endif /* KVCONNECT_H */
