/* Internal declarations shared by the Go half (cgo preamble) and the C
 * half (kvconnect.c) of libkvconnect. Not installed. */
#ifndef KVCONNECT_SHIM_H
#define KVCONNECT_SHIM_H

#include <stddef.h>
#include <stdint.h>

/* Sets the calling thread's last error (copies both strings). */
void kvc__set_error(const char *text, const char *json);

/* One mapping a forked child must make private: [start, end) of this
 * process is fd at offset. */
typedef struct {
	uint64_t start, end;
	int fd;
	uint64_t offset;
} kvc__fork_entry;

/* Replaces the table of mappings a forked child remaps privately. Called
 * with the fork lock held (kvc__fork_lock). */
void kvc__fork_table_set(const kvc__fork_entry *entries, size_t n);
void kvc__fork_lock(void);
void kvc__fork_unlock(void);

/* Publishes the library's version string (static) to the C half, so that
 * kvc_version answers without entering Go: a forked child must not. */
void kvc__set_version(const char *v);

#endif
