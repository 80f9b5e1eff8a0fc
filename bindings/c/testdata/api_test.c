// api_test.c exercises libkvconnect through kvconnect.h as a C program
// would: two engines in one process (rdma asked for, the chain falls back
// to tcp here), memory from malloc and from the engine, sync and async
// transfers verified byte by byte, notifications, probes, bad input, many
// threads at once, and fork. Run by bindings/c's Go test; argv[1] is the
// plugin directory. Exits non-zero with a message on the first failure.
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kvconnect.h"

static int failures;

#define CHECK(cond, ...)                                                        \
	do {                                                                        \
		if (!(cond)) {                                                          \
			fprintf(stderr, "%s:%d: FAIL: ", __FILE__, __LINE__);               \
			fprintf(stderr, __VA_ARGS__);                                       \
			fprintf(stderr, " (last error: %s)\n", kvc_last_error());           \
			exit(1);                                                            \
		}                                                                       \
	} while (0)

static void fill(unsigned char *p, size_t n, unsigned seed) {
	for (size_t i = 0; i < n; i++) p[i] = (unsigned char)(i * 31 + seed * 7 + (i >> 9));
}

static kvc_engine start(const char *plugin_dir) {
	char defaults[4096];
	snprintf(defaults, sizeof defaults, "{\"plugin_dir\": \"%s\"}", plugin_dir);
	kvc_engine e = kvc_engine_new();
	CHECK(e != 0, "kvc_engine_new");
	CHECK(kvc_engine_set_defaults(e, defaults) == 0, "set_defaults");
	int rc = kvc_engine_initialize(e, "127.0.0.1", "P2PHANDSHAKE", "rdma", "");
	CHECK(rc == 0, "initialize with rdma on a host without RDMA: %d, want 0 (fallback)", rc);
	return e;
}

// turns reads the library's count of scheduler turns from e's status.
static unsigned long long turns(kvc_engine e) {
	char *status = kvc_engine_status_json(e);
	CHECK(status != NULL, "status");
	const char *at = strstr(status, "\"scheduler_turns\":");
	CHECK(at != NULL, "status names the library's scheduler turns: %s", status);
	unsigned long long n = strtoull(at + strlen("\"scheduler_turns\":"), NULL, 10);
	kvc_free(status);
	return n;
}

static double now_ms(void) {
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

struct worker {
	kvc_engine e;
	const char *peer;
	unsigned char *local;
	uint64_t remote;
	size_t n;
	int rc;
};

static void *work(void *arg) {
	struct worker *w = arg;
	for (int i = 0; i < 50 && w->rc == 0; i++) {
		uint64_t l = (uint64_t)(uintptr_t)w->local, len = w->n;
		w->rc = kvc_transfer_sync(w->e, w->peer, i % 2 ? KVC_OP_READ : KVC_OP_WRITE, &l, &w->remote, &len, 1, -1);
	}
	return NULL;
}

// keep_calling calls into the library until *stop, for forks that
// happen while threads are inside it.
struct caller {
	kvc_engine e;
	volatile int stop;
};

static void *keep_calling(void *arg) {
	struct caller *c = arg;
	while (!c->stop) kvc_engine_rpc_port(c->e);
	return NULL;
}

int main(int argc, char **argv) {
	CHECK(argc == 2, "usage: api_test PLUGIN_DIR");
	CHECK(strlen(kvc_version()) > 0, "version");

	// Bad input before anything runs.
	kvc_engine bad = kvc_engine_new();
	CHECK(kvc_engine_set_defaults(bad, "{\"no_such_key\": 1}") == KVC_ERR_INVALID_ARGUMENT, "unknown default key");
	CHECK(strstr(kvc_last_error(), "no_such_key") != NULL, "the error names the key");
	CHECK(kvc_engine_initialize(bad, "not a host!", "P2PHANDSHAKE", "tcp", "") == KVC_ERR_INVALID_ARGUMENT, "garbage hostname");
	CHECK(strstr(kvc_last_error(), "not a host!") != NULL, "the error names the hostname");
	CHECK(kvc_engine_rpc_port(bad) == KVC_ERR_NOT_INITIALIZED, "rpc port before initialize");
	CHECK(kvc_register_memory(bad, 4096, 10) == KVC_ERR_NOT_INITIALIZED, "register before initialize");
	CHECK(kvc_engine_close(bad) == 0, "close an uninitialized engine");
	CHECK(kvc_engine_close(bad) == 0, "close twice: idempotent");
	CHECK(kvc_engine_rpc_port(bad) == KVC_ERR_CLOSED, "a closed engine's handle says closed");
	CHECK(kvc_engine_rpc_port(bad + 1000) == KVC_ERR_INVALID_ARGUMENT, "a handle never made is invalid");
	CHECK(kvc_engine_rpc_port(987654) == KVC_ERR_INVALID_ARGUMENT, "unknown handle");

	// Strict mode: nothing can start, the full diagnosis comes back.
	char strict[4096];
	snprintf(strict, sizeof strict, "{\"plugin_dir\": \"%s\", \"fallback\": []}", argv[1]);
	kvc_engine s = kvc_engine_new();
	CHECK(kvc_engine_set_defaults(s, strict) == 0, "strict defaults");
	CHECK(kvc_engine_initialize(s, "127.0.0.1", "P2PHANDSHAKE", "rdma", "") == KVC_ERR_UNAVAILABLE, "strict rdma");
	CHECK(strstr(kvc_last_error_json(), "\"attempts\"") != NULL && strstr(kvc_last_error_json(), "\"step\"") != NULL,
	      "strict failure's JSON carries the attempts with their diagnosis: %s", kvc_last_error_json());
	kvc_engine_close(s);

	// kvc_engine_initialize_synced starts with the environment as last
	// synced; kvc_sync_environ brings in what setenv changed since.
	char plain[4096];
	snprintf(plain, sizeof plain, "{\"plugin_dir\": \"%s\"}", argv[1]);
	setenv("MC_MIN_RPC_PORT", "70000", 1);
	kvc_engine u = kvc_engine_new();
	CHECK(kvc_engine_set_defaults(u, plain) == 0, "defaults");
	int rc = kvc_engine_initialize_synced(u, "127.0.0.1", "P2PHANDSHAKE", "tcp", "", NULL);
	CHECK(rc == 0, "initialize_synced before kvc_sync_environ: %d (%s), want 0: it read the environment", rc, kvc_last_error());
	kvc_engine_close(u);
	CHECK(kvc_sync_environ() == 0, "sync_environ");
	u = kvc_engine_new();
	CHECK(kvc_engine_set_defaults(u, plain) == 0, "defaults");
	rc = kvc_engine_initialize_synced(u, "127.0.0.1", "P2PHANDSHAKE", "tcp", "", NULL);
	CHECK(rc == KVC_ERR_INVALID_ARGUMENT && strstr(kvc_last_error(), "MC_MIN_RPC_PORT"),
	      "initialize_synced after kvc_sync_environ: %d (%s), want the MC_MIN_RPC_PORT set since", rc, kvc_last_error());
	kvc_engine_close(u);
	unsetenv("MC_MIN_RPC_PORT");
	CHECK(kvc_sync_environ() == 0, "sync_environ");

	kvc_engine a = start(argv[1]), b = start(argv[1]);
	char *status = kvc_engine_status_json(a);
	CHECK(status && strstr(status, "\"fallback\":true") && strstr(status, "\"transport\":\"tcp\""), "status after fallback: %s", status);
	kvc_free(status);
	int port = kvc_engine_rpc_port(b);
	CHECK(port >= 15000 && port <= 17000, "P2P RPC port %d in Mooncake's 15000-17000", port);
	char *peer = kvc_engine_session_id(b);
	CHECK(peer != NULL, "session id");
	char want[64];
	snprintf(want, sizeof want, "127.0.0.1:%d", port);
	CHECK(strcmp(peer, want) == 0, "session %s, want %s", peer, want);

	// Memory: a malloc'd buffer in a, a managed one in b.
	const size_t n = 1 << 20;
	unsigned char *mine = malloc(n + 123);
	unsigned char *src = mine + 123; // unaligned, like any heap buffer
	fill(src, n, 1);
	CHECK(kvc_register_memory(a, (uint64_t)(uintptr_t)src, n) == 0, "register malloc'd memory");
	uint64_t theirs = kvc_allocate_managed(b, n);
	CHECK(theirs != 0, "allocate_managed");
	CHECK(kvc_segment_first_buffer(a, peer, -1) == theirs, "first buffer of b is its managed buffer");

	uint64_t l = (uint64_t)(uintptr_t)src, r = theirs, len = n;
	CHECK(kvc_transfer_sync(a, peer, KVC_OP_WRITE, &l, &r, &len, 1, -1) == 0, "sync WRITE");
	CHECK(memcmp((void *)(uintptr_t)theirs, src, n) == 0, "WRITE: bytes differ");
	fill((unsigned char *)(uintptr_t)theirs, n, 2);
	kvc_batch id = kvc_batch_submit(a, peer, KVC_OP_READ, &l, &r, &len, 1, -1);
	CHECK(id != 0, "async READ submit");
	int32_t st = -1;
	rc = kvc_batch_wait(a, id, 30000, &st, 1);
	CHECK(rc == KVC_BATCH_DONE && st == KVC_STATUS_COMPLETED, "async READ: wait %d status %d", rc, st);
	CHECK(memcmp((void *)(uintptr_t)theirs, src, n) == 0, "READ: bytes differ");
	CHECK(kvc_batch_free(a, id) == 0, "free batch");
	CHECK(kvc_batch_wait(a, id, 0, NULL, 0) == KVC_ERR_UNKNOWN_BATCH, "wait on a freed batch");

	// Timeouts at their extremes: INT64_MAX waits (it must not wrap to an
	// immediate timeout), a negative one means transfer_timeout (a wait
	// with it waits for the batch, not polls).
	CHECK(kvc_transfer_sync(a, peer, KVC_OP_WRITE, &l, &r, &len, 1, INT64_MAX) == 0, "sync WRITE with timeout INT64_MAX: %s", kvc_last_error());
	for (int i = 0; i < 20; i++) {
		kvc_batch big = kvc_batch_submit(a, peer, KVC_OP_READ, &l, &r, &len, 1, INT64_MAX);
		CHECK(big != 0, "submit with timeout INT64_MAX: %s", kvc_last_error());
		rc = kvc_batch_wait(a, big, -1, &st, 1);
		CHECK(rc == KVC_BATCH_DONE, "wait with timeout -1 (transfer_timeout): %d, want KVC_BATCH_DONE", rc);
		CHECK(kvc_batch_free(a, big) == 0, "free batch");
	}
	// kvc_batch_wait's errors never read as a batch outcome (-1, -2).
	rc = kvc_batch_wait(987654321, 1, 0, NULL, 0);
	CHECK(rc <= -1000, "wait with an engine handle never given out: %d, want a KVC_ERR_ below -1000", rc);

	// Bad input on a running engine: the documented codes, no crash.
	uint64_t junk = 0x1000, zero = 0;
	CHECK(kvc_transfer_sync(a, peer, KVC_OP_WRITE, &junk, &r, &len, 1, -1) == KVC_ERR_ADDRESS_NOT_REGISTERED, "unregistered local address");
	CHECK(kvc_transfer_sync(a, peer, KVC_OP_WRITE, &l, &r, &zero, 1, -1) == KVC_ERR_INVALID_ARGUMENT, "length 0");
	uint64_t past = theirs + n - 10, twenty = 20;
	CHECK(kvc_transfer_sync(a, peer, KVC_OP_WRITE, &l, &past, &twenty, 1, -1) == KVC_ERR_ADDRESS_NOT_REGISTERED, "past the peer's buffer");
	CHECK(kvc_transfer_sync(a, peer, 7, &l, &r, &len, 1, -1) == KVC_ERR_INVALID_ARGUMENT, "op 7");
	CHECK(kvc_register_memory(a, (uint64_t)(uintptr_t)(src + 100), 10) == KVC_ERR_ADDRESS_OVERLAPPED, "overlapping registration");
	// Garbage sizes (a negative number through uint64_t or size_t) are
	// refused, not a crash of this process.
	CHECK(kvc_register_memory(a, 0x10000, 3ULL << 62) == KVC_ERR_INVALID_ARGUMENT, "register 3<<62 bytes");
	CHECK(kvc_register_memory_batch(a, &junk, &len, (size_t)-1) == KVC_ERR_INVALID_ARGUMENT, "register (size_t)-1 buffers");
	CHECK(kvc_unregister_memory_batch(a, &junk, (size_t)-1) == KVC_ERR_INVALID_ARGUMENT, "unregister (size_t)-1 buffers");
	CHECK(kvc_batch_submit(a, "127.0.0.1:1", KVC_OP_WRITE, &l, &r, &len, 1, 5000) == 0, "unreachable peer: batch id 0");
	CHECK(strlen(kvc_last_error()) > 0, "unreachable peer: an error");
	CHECK(kvc_probe(a, "127.0.0.1:1", 5000) == KVC_ERR_SOCKET, "probe of an unreachable peer");
	CHECK(kvc_probe(a, "no-such-host.invalid:15000", 5000) == KVC_ERR_DNS, "probe of a name that does not resolve: %s", kvc_last_error());
	CHECK(kvc_probe(a, peer, 5000) == 0, "probe of b");

	// Notifications.
	CHECK(kvc_notify(a, peer, "done", "blocks 0-9", 5000) == 0, "notify");
	char *notes = NULL;
	for (int i = 0; i < 500; i++) {
		notes = kvc_get_notifies(b);
		CHECK(notes != NULL, "get_notifies");
		if (strstr(notes, "blocks 0-9")) break;
		kvc_free(notes);
		notes = NULL;
		usleep(10000);
	}
	CHECK(notes != NULL && strstr(notes, "\"name\":\"done\""), "notification arrived");
	kvc_free(notes);

	// Threads at once, each on its own slice.
	pthread_t th[4];
	struct worker w[4];
	for (int i = 0; i < 4; i++) {
		w[i] = (struct worker){a, peer, src + i * (n / 4), theirs + i * (n / 4), n / 4, 0};
		pthread_create(&th[i], NULL, work, &w[i]);
	}
	for (int i = 0; i < 4; i++) {
		pthread_join(th[i], NULL);
		CHECK(w[i].rc == 0, "thread %d: %d", i, w[i].rc);
	}

	// A thread that keeps calling takes a turn through the Go scheduler
	// once per 5 ms (turns.go): at least one in 50 ms of calls, never more
	// than one per 5 ms by the same clock, and not one per call.
	unsigned long long before = turns(a);
	long calls = 0;
	double t0 = now_ms(), t1;
	do {
		CHECK(kvc_engine_rpc_port(a) > 0, "rpc port");
		calls++;
	} while ((t1 = now_ms()) - t0 < 50 || calls < 1000);
	unsigned long long took = turns(a) - before;
	CHECK(took >= 1 && took <= 2 + (unsigned long long)((t1 - t0) / 5) && (long)took < calls,
	      "%llu scheduler turns in %ld calls over %.1f ms: want at least 1 and at most one per 5 ms", took, calls, t1 - t0);

	// fork: the child cannot use the library, and its writes to registered
	// memory stay its own.
	memset(src, 0x5A, 64);
	pid_t pid = fork();
	if (pid == 0) {
		int ok = kvc_engine_new() == 0 && kvc_engine_rpc_port(a) == KVC_ERR_FORKED && strstr(kvc_last_error(), "forked");
		memset(src, 0xA5, 64);
		_exit(ok ? 0 : 3);
	}
	int wst;
	waitpid(pid, &wst, 0);
	CHECK(WIFEXITED(wst) && WEXITSTATUS(wst) == 0, "forked child saw the library refuse");
	CHECK(src[0] == 0x5A && src[63] == 0x5A, "the child's write reached the parent's registered memory");
	CHECK(kvc_transfer_sync(a, peer, KVC_OP_WRITE, &l, &r, &len, 1, -1) == 0, "the parent still works after fork");

	// fork: a byte beside the registered buffer on its first page (the
	// heap's, not the buffer's: src is never page aligned, malloc's
	// alignment plus 123) is in the child as it was at the fork, whatever
	// the parent writes there after fork returns.
	unsigned char *beside = src - 1;
	CHECK(((uintptr_t)beside & ~(uintptr_t)4095) == ((uintptr_t)src & ~(uintptr_t)4095), "src's byte before is on its page");
	*beside = 0x11;
	int gate[2];
	CHECK(pipe(gate) == 0, "pipe");
	pid = fork();
	if (pid == 0) {
		char c;
		_exit(read(gate[0], &c, 1) == 1 && *beside == 0x11 ? 0 : 4);
	}
	*beside = 0x22;
	CHECK(write(gate[1], "x", 1) == 1, "pipe write");
	waitpid(pid, &wst, 0);
	CHECK(WIFEXITED(wst) && WEXITSTATUS(wst) == 0,
	      "the child saw the parent's write after the fork beside its registered buffer (status %d)", wst);
	close(gate[0]);
	close(gate[1]);

	// fork while other threads are inside the library: the child's
	// kvc_version answers without entering Go, which can hang there (the
	// alarm ends a child that hangs).
	struct caller busy = {a, 0};
	pthread_t callers[2];
	for (int i = 0; i < 2; i++) pthread_create(&callers[i], NULL, keep_calling, &busy);
	const char *version = kvc_version();
	for (int i = 0; i < 5; i++) {
		pid = fork();
		if (pid == 0) {
			alarm(10);
			const char *v = kvc_version();
			_exit(v != NULL && strcmp(v, version) == 0 ? 0 : 3);
		}
		waitpid(pid, &wst, 0);
		CHECK(WIFEXITED(wst) && WEXITSTATUS(wst) == 0,
		      "kvc_version in a child forked while threads call in: %s %d (want the parent's version, at once)",
		      WIFSIGNALED(wst) ? "killed by signal" : "exit status", WIFSIGNALED(wst) ? WTERMSIG(wst) : WEXITSTATUS(wst));
	}
	busy.stop = 1;
	for (int i = 0; i < 2; i++) pthread_join(callers[i], NULL);

	// Unregister: twice is an error; the memory is ordinary again.
	CHECK(kvc_unregister_memory(a, l) == 0, "unregister");
	CHECK(kvc_unregister_memory(a, l) == KVC_ERR_ADDRESS_NOT_REGISTERED, "unregister twice");
	src[0] = 1;
	CHECK(kvc_transfer_sync(a, peer, KVC_OP_WRITE, &l, &r, &len, 1, -1) == KVC_ERR_ADDRESS_NOT_REGISTERED, "transfer from unregistered memory");
	CHECK(kvc_free_managed(b, theirs) == 0, "free managed");
	CHECK(kvc_free_managed(b, theirs) == KVC_ERR_ADDRESS_NOT_REGISTERED, "free managed twice");

	CHECK(kvc_engine_close(a) == 0 && kvc_engine_close(b) == 0, "close");
	CHECK(kvc_transfer_sync(a, peer, KVC_OP_WRITE, &l, &r, &len, 1, -1) == KVC_ERR_CLOSED, "use after close");
	src[1] = 2; // the caller's memory is still its own
	free(mine);
	kvc_free(peer);
	printf("api_test: ok\n");
	return failures;
}
