// The C half of libkvconnect: the public functions of kvconnect.h, the
// calling thread's last error, and what happens in a child forked after the
// library started. Each public function refuses to run in such a child (the
// Go runtime does not survive fork), then calls its Go implementation
// (kvcgo_*, exports.go).

#define _GNU_SOURCE // mremap
#include <linux/futex.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "_cgo_export.h"
#include "include/kvconnect.h"
#include "shim.h"

// ---- last error, per thread ------------------------------------------------

typedef struct {
	char *text;
	char *json;
} last_error;

static pthread_key_t error_key;
static pthread_once_t error_once = PTHREAD_ONCE_INIT;

static void free_error(void *p) {
	last_error *e = p;
	free(e->text);
	free(e->json);
	free(e);
}

static void make_error_key(void) { pthread_key_create(&error_key, free_error); }

static last_error *thread_error(void) {
	pthread_once(&error_once, make_error_key);
	last_error *e = pthread_getspecific(error_key);
	if (e == NULL) {
		e = calloc(1, sizeof *e);
		if (e != NULL) pthread_setspecific(error_key, e);
	}
	return e;
}

void kvc__set_error(const char *text, const char *json) {
	last_error *e = thread_error();
	if (e == NULL) return;
	free(e->text);
	free(e->json);
	e->text = strdup(text ? text : "");
	e->json = strdup(json ? json : "{}");
}

const char *kvc_last_error(void) {
	last_error *e = thread_error();
	return e && e->text ? e->text : "";
}

const char *kvc_last_error_json(void) {
	last_error *e = thread_error();
	return e && e->json ? e->json : "{}";
}

void kvc_free(void *p) { free(p); }

// ---- fork --------------------------------------------------------------------

// forked is set in a child forked after the library was loaded: the Go
// runtime's threads did not come along, so no call may enter Go.
static volatile int forked;
static pthread_mutex_t fork_mu = PTHREAD_MUTEX_INITIALIZER;
static kvc__fork_entry *fork_table;
static size_t fork_n;

void kvc__fork_lock(void) { pthread_mutex_lock(&fork_mu); }
void kvc__fork_unlock(void) { pthread_mutex_unlock(&fork_mu); }

void kvc__fork_table_set(const kvc__fork_entry *entries, size_t n) {
	kvc__fork_entry *t = NULL;
	if (n > 0) {
		t = malloc(n * sizeof *t);
		if (t == NULL) return; // keep the old table: better than none
		memcpy(t, entries, n * sizeof *t);
	}
	free(fork_table);
	fork_table = t;
	fork_n = n;
}

// fork_gate is a word of memory shared with every child: a child forked
// while entries exist sets it once it has its private copies of the
// entries' edge pages, and the parent's fork returns only then (bounded
// by FORK_GATE_NS). NULL if the page could not be made.
static uint32_t *fork_gate;
#define FORK_GATE_NS 1000000000ll
#define PAGE 4096ull

static long futex(uint32_t *w, int op, uint32_t v, const struct timespec *t) {
	return syscall(SYS_futex, w, op, v, t, NULL, 0);
}

static void before_fork(void) {
	pthread_mutex_lock(&fork_mu);
	if (fork_gate != NULL) __atomic_store_n(fork_gate, 0, __ATOMIC_RELEASE);
}

// The parent waits for its child's copies (after_fork_child): until then
// nothing in this thread touches the pages the child copies (other
// threads could; a Python program's others wait for the GIL this one
// holds).
static void after_fork_parent(void) {
	if (fork_n > 0 && fork_gate != NULL) {
		struct timespec start, now;
		clock_gettime(CLOCK_MONOTONIC, &start);
		while (__atomic_load_n(fork_gate, __ATOMIC_ACQUIRE) == 0) {
			clock_gettime(CLOCK_MONOTONIC, &now);
			long long left = FORK_GATE_NS - ((now.tv_sec - start.tv_sec) * 1000000000ll + (now.tv_nsec - start.tv_nsec));
			if (left <= 0) break; // the child died or stalls: go on
			struct timespec t = {left / 1000000000ll, left % 1000000000ll};
			futex(fork_gate, FUTEX_WAIT, 0, &t);
		}
	}
	pthread_mutex_unlock(&fork_mu);
}

// private_copy replaces [a, b) with a private anonymous copy of what it
// holds now.
static void private_copy(uint64_t a, uint64_t b) {
	size_t n = (size_t)(b - a);
	void *tmp = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (tmp == MAP_FAILED) return;
	memcpy(tmp, (void *)(uintptr_t)a, n);
	if (mremap(tmp, n, n, MREMAP_MAYMOVE | MREMAP_FIXED, (void *)(uintptr_t)a) == MAP_FAILED) munmap(tmp, n);
}

// In the child, memory the parent shares with its transports (registered
// caller memory moved into shared memory, managed buffers) becomes private,
// as fork gives ordinary memory: the child's writes never reach the parent
// or its peers. An entry's first and last pages are copied at once: they
// may hold the parent's other data (a heap's bookkeeping beside a
// registered buffer), which must be as it was at the fork, not as the
// parent goes on changing it. The pages between become a private
// copy-on-write mapping of the same file (no copy, whatever their size).
static void after_fork_child(void) {
	forked = 1;
	for (size_t i = 0; i < fork_n; i++) {
		kvc__fork_entry *e = &fork_table[i];
		uint64_t lo = e->start, hi = e->end;
		uint64_t head = lo + PAGE < hi ? lo + PAGE : hi;
		uint64_t tail = hi - PAGE > head ? hi - PAGE : head;
		private_copy(lo, head);
		if (tail > head) {
			mmap((void *)(uintptr_t)head, tail - head, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_FIXED, e->fd,
			     (off_t)(e->offset + (head - lo)));
		}
		if (hi > tail) private_copy(tail, hi);
	}
	if (fork_gate != NULL) {
		__atomic_store_n(fork_gate, 1, __ATOMIC_RELEASE);
		futex(fork_gate, FUTEX_WAKE, 1, NULL);
	}
	pthread_mutex_unlock(&fork_mu);
}

__attribute__((constructor)) static void kvc_init(void) {
	void *gate = mmap(NULL, PAGE, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (gate != MAP_FAILED) fork_gate = gate;
	pthread_atfork(before_fork, after_fork_parent, after_fork_child);
}

static int refuse_forked(void) {
	kvc__set_error("kvconnect: this process was forked after the kvconnect library started, and the library cannot run in "
	               "a forked child (its runtime's threads stay in the parent); create engines after forking, or start "
	               "workers with the spawn method",
	               "{\"code\":-1005,\"kind\":\"forked\"}");
	return KVC_ERR_FORKED;
}

// ---- the calling thread's turn in the Go scheduler ------------------------------

// A thread that keeps calling in takes a turn through the Go scheduler once
// per TURN_NS (turns.go says why). The first call only starts the clock: a
// thread that calls once never needs a turn.
#define TURN_NS 5000000ull

static __thread uint64_t last_turn;

static void take_turn(void) {
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	uint64_t now = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
	if (last_turn == 0) {
		last_turn = now;
		return;
	}
	if (now - last_turn < TURN_NS) return;
	last_turn = now;
	kvcgo_take_turn();
}

// CHECK_FORK refuses a call in a forked child, and otherwise gives the
// calling thread its turn when one is due.
#define CHECK_FORK(fail)          \
	do {                          \
		if (forked) {             \
			refuse_forked();      \
			return fail;          \
		}                         \
		take_turn();              \
	} while (0)

// ---- the API -------------------------------------------------------------------

// version is the library's version, published by the Go half's init
// (kvc__set_version): kvc_version answers from it without entering Go, so
// it works in a forked child too, where entering Go can hang.
static const char *volatile version;

void kvc__set_version(const char *v) { version = v; }

const char *kvc_version(void) {
	const char *v = version;
	if (v != NULL) return v;
	if (forked) return "unknown (forked before the library started)";
	return kvcgo_version();
}

kvc_engine kvc_engine_new(void) {
	CHECK_FORK(0);
	return kvcgo_engine_new();
}

int kvc_engine_set_defaults(kvc_engine e, const char *json) {
	CHECK_FORK(KVC_ERR_FORKED);
	return kvcgo_engine_set_defaults(e, (char *)json);
}

int kvc_engine_initialize(kvc_engine e, const char *local_hostname, const char *metadata, const char *protocol,
                          const char *device_name) {
	CHECK_FORK(KVC_ERR_FORKED);
	kvcgo_sync_environ();
	return kvcgo_engine_initialize(e, (char *)local_hostname, (char *)metadata, (char *)protocol, (char *)device_name);
}

int kvc_engine_initialize_ext(kvc_engine e, const char *local_hostname, const char *metadata, const char *protocol,
                              const char *device_name, const char *metadata_type) {
	CHECK_FORK(KVC_ERR_FORKED);
	kvcgo_sync_environ();
	return kvcgo_engine_initialize_ext(e, (char *)local_hostname, (char *)metadata, (char *)protocol,
	                                   (char *)device_name, (char *)metadata_type);
}

int kvc_engine_initialize_synced(kvc_engine e, const char *local_hostname, const char *metadata,
                                 const char *protocol, const char *device_name, const char *metadata_type) {
	CHECK_FORK(KVC_ERR_FORKED);
	return kvcgo_engine_initialize_ext(e, (char *)local_hostname, (char *)metadata, (char *)protocol,
	                                   (char *)device_name, (char *)metadata_type);
}

int kvc_engine_close(kvc_engine e) {
	CHECK_FORK(KVC_ERR_FORKED);
	kvc__fork_lock();
	int rc = kvcgo_engine_close(e);
	kvc__fork_unlock();
	return rc;
}

int kvc_engine_rpc_port(kvc_engine e) {
	CHECK_FORK(KVC_ERR_FORKED);
	return kvcgo_engine_rpc_port(e);
}

char *kvc_engine_session_id(kvc_engine e) {
	CHECK_FORK(NULL);
	return kvcgo_engine_session_id(e);
}

char *kvc_engine_status_json(kvc_engine e) {
	CHECK_FORK(NULL);
	return kvcgo_engine_status_json(e);
}

int kvc_register_memory(kvc_engine e, uint64_t addr, uint64_t length) {
	return kvc_register_memory_batch(e, &addr, &length, 1);
}

int kvc_register_memory_batch(kvc_engine e, const uint64_t *addrs, const uint64_t *lengths, size_t n) {
	CHECK_FORK(KVC_ERR_FORKED);
	kvc__fork_lock();
	int rc = kvcgo_register_memory_batch(e, (uint64_t *)addrs, (uint64_t *)lengths, n);
	kvc__fork_unlock();
	return rc;
}

int kvc_unregister_memory(kvc_engine e, uint64_t addr) { return kvc_unregister_memory_batch(e, &addr, 1); }

int kvc_unregister_memory_batch(kvc_engine e, const uint64_t *addrs, size_t n) {
	CHECK_FORK(KVC_ERR_FORKED);
	kvc__fork_lock();
	int rc = kvcgo_unregister_memory_batch(e, (uint64_t *)addrs, n);
	kvc__fork_unlock();
	return rc;
}

uint64_t kvc_allocate_managed(kvc_engine e, uint64_t length) {
	CHECK_FORK(0);
	kvc__fork_lock();
	uint64_t addr = kvcgo_allocate_managed(e, length);
	kvc__fork_unlock();
	return addr;
}

int kvc_free_managed(kvc_engine e, uint64_t addr) {
	CHECK_FORK(KVC_ERR_FORKED);
	kvc__fork_lock();
	int rc = kvcgo_free_managed(e, addr);
	kvc__fork_unlock();
	return rc;
}

int kvc_open_segment(kvc_engine e, const char *session, int64_t timeout_ms) {
	CHECK_FORK(KVC_ERR_FORKED);
	return kvcgo_open_segment(e, (char *)session, timeout_ms);
}

uint64_t kvc_segment_first_buffer(kvc_engine e, const char *session, int64_t timeout_ms) {
	CHECK_FORK(0);
	return kvcgo_segment_first_buffer(e, (char *)session, timeout_ms);
}

int kvc_probe(kvc_engine e, const char *session, int64_t timeout_ms) {
	CHECK_FORK(KVC_ERR_FORKED);
	return kvcgo_probe(e, (char *)session, timeout_ms);
}

int kvc_notify(kvc_engine e, const char *session, const char *name, const char *msg, int64_t timeout_ms) {
	CHECK_FORK(KVC_ERR_FORKED);
	return kvcgo_notify(e, (char *)session, (char *)name, (char *)msg, timeout_ms);
}

char *kvc_get_notifies(kvc_engine e) {
	CHECK_FORK(NULL);
	return kvcgo_get_notifies(e);
}

int kvc_transfer_sync(kvc_engine e, const char *session, int op, const uint64_t *local, const uint64_t *remote,
                      const uint64_t *lengths, size_t n, int64_t timeout_ms) {
	CHECK_FORK(KVC_ERR_FORKED);
	return kvcgo_transfer_sync(e, (char *)session, op, (uint64_t *)local, (uint64_t *)remote, (uint64_t *)lengths, n,
	                           timeout_ms);
}

kvc_batch kvc_batch_submit(kvc_engine e, const char *session, int op, const uint64_t *local, const uint64_t *remote,
                           const uint64_t *lengths, size_t n, int64_t timeout_ms) {
	CHECK_FORK(0);
	return kvcgo_batch_submit(e, (char *)session, op, (uint64_t *)local, (uint64_t *)remote, (uint64_t *)lengths, n,
	                          timeout_ms);
}

int kvc_batch_wait(kvc_engine e, kvc_batch b, int64_t timeout_ms, int32_t *statuses, size_t n) {
	CHECK_FORK(KVC_ERR_FORKED);
	return kvcgo_batch_wait(e, b, timeout_ms, statuses, n);
}

int kvc_batch_free(kvc_engine e, kvc_batch b) {
	CHECK_FORK(KVC_ERR_FORKED);
	return kvcgo_batch_free(e, b);
}

char *kvc_engine_topology(kvc_engine e, const char *device_name) {
	CHECK_FORK(NULL);
	return kvcgo_engine_topology(e, (char *)device_name);
}

int kvc_sync_environ(void) {
	CHECK_FORK(KVC_ERR_FORKED);
	return kvcgo_sync_environ();
}
