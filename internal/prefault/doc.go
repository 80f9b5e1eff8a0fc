// Package prefault makes memory ready for the kernel's copies before the
// first op needs it.
//
// A region's pages are faulted in when it is allocated or mapped
// (internal/shm: MADV_POPULATE_WRITE), which fills the process's page
// tables. On some virtual machines that is not enough: the kernel's own
// first access to each page, from a read(2) or write(2) on a socket,
// still costs a trap to the hypervisor. On the AMD EPYC VM of
// docs/DATAPATH-ROUNDS.md (a PVM guest, pti=on) it was about 6 µs per 4 KiB
// page and process, so the first pass of a tcp transport over a fresh
// 512 MiB region ran at 0.3 GB/s where the next ran at 3.5 (each op's
// bytes are a page first used on both sides), and touching every page from
// user space, even writing all of it, did not help; one kernel-mode read
// of a byte of each page did (seventeenth round). The likely cause is that
// the hypervisor shadows each page-table root separately and page-table
// isolation gives the kernel a root of its own; that was not verified.
// On hardware without it the pass costs a cache miss per page.
//
// ForKernel does that read for a transport whose data path is the
// kernel's (tcp), once per region and per process that copies it, when the
// region is registered. The cost is the same, about 6 µs a page there
// either way; it moves from the first transfers, which then run at the
// speed of the later ones, to registration, as ibv_reg_mr's pinning does
// for RDMA.
package prefault
