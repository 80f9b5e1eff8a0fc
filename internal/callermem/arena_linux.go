//go:build linux

package callermem

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"os"
	"runtime/debug"
	"slices"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/kvconnect/kvconnect/internal/shm"
)

const (
	// arenaSize is the arena file's (sparse) size: every user address of
	// x86-64 and arm64, 5-level page tables included, is an offset in it.
	arenaSize = 1 << 57
	// moveChunk bounds how much memory is copied before it is remapped,
	// so moving a large range costs at most this much more memory at once.
	moveChunk = 64 << 20
)

// arenaState is the process-wide arena. Guarded by mu.
type arenaState struct {
	mu     sync.Mutex
	file   *os.File // nil until the first Share, and again once nothing is held
	dev    string   // the file's device as /proc/self/maps prints it
	ino    uint64
	held   spans
	leases int
}

var arena arenaState

var zeroPage = make([]byte, unix.Getpagesize())

// Share makes mem reachable by other processes through the returned
// lease's file: private pages are moved into the arena (see the package
// comment), a shared file mapping is reached through its own file. mem
// stays where it is, with its contents. Invalid memory (unmapped,
// read-only, a stack, hugetlb, a shared mapping of a file on disk) is
// refused with errdefs.ErrInvalidArgument saying what was found.
func Share(mem []byte) (*Lease, error) {
	if len(mem) == 0 {
		return nil, errInvalid("an empty range cannot be shared")
	}
	addr, n := uint64(uintptr(unsafe.Pointer(unsafe.SliceData(mem)))), uint64(len(mem))
	page := uint64(unix.Getpagesize())
	if addr+n < addr || addr+n > arenaSize-page {
		return nil, errInvalid("range [0x%x, +%d) wraps or lies outside the user address space", addr, n)
	}
	p, q := addr&^(page-1), (addr+n+page-1)&^(page-1)
	arena.mu.Lock()
	defer arena.mu.Unlock()
	vmas, err := readMaps(p, q)
	if err != nil {
		return nil, err
	}
	if err := checkCovered(vmas, p, q, addr, n); err != nil {
		return nil, err
	}
	var ours, theirs int
	for _, v := range vmas {
		switch {
		case arena.owns(v):
			ours++
		case v.shared:
			theirs++
		}
	}
	switch {
	case theirs > 0 && (ours > 0 || theirs < len(vmas)):
		return nil, errInvalid("range [0x%x, +%d) mixes a shared file mapping with other memory (%s): register each part on its own", addr, n, describe(vmas))
	case theirs > 0:
		return shareFile(vmas, addr, n)
	}
	return arena.share(p, q, addr)
}

// Held lists the runs of this process's pages the arena backs (at file
// offset equal to their address) and the arena's descriptor (-1 when
// none), for a fork handler that remaps them privately in the child.
func Held() (fd int, ranges []Range) {
	arena.mu.Lock()
	defer arena.mu.Unlock()
	if arena.file == nil {
		return -1, nil
	}
	for _, r := range arena.held.ranges() {
		ranges = append(ranges, Range{Start: r[0], End: r[1]})
	}
	return int(arena.file.Fd()), ranges
}

// Release gives the memory back: pages no other lease holds become
// private memory again, with their contents. It is idempotent. The
// holder must have stopped every use of File first (deregistered the
// region everywhere).
func (l *Lease) Release() error {
	arena.mu.Lock()
	if l.done {
		arena.mu.Unlock()
		return nil
	}
	l.done = true
	arena.mu.Unlock()
	return l.release()
}

// readMaps returns this process's mappings intersecting [p, q).
func readMaps(p, q uint64) ([]vma, error) {
	text, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		return nil, fmt.Errorf("callermem: %w", err)
	}
	vmas, err := parseMaps(text, p, q)
	if err != nil {
		return nil, fmt.Errorf("callermem: %w", err)
	}
	return vmas, nil
}

// deviceHint ends the errors for memory this process cannot use as
// host memory: what a GPU pointer (vLLM's default kv_buffer_device is
// cuda) looks like from here.
const deviceHint = "; a GPU (CUDA, NPU) pointer looks like this: only host memory can be registered for now, so keep the KV cache in host memory (vLLM: kv_buffer_device \"cpu\")"

// checkCovered says whether vmas map every page of [p, q) readable and
// writable, none of them special.
func checkCovered(vmas []vma, p, q, addr, n uint64) error {
	next := p
	for _, v := range vmas {
		if v.start > next {
			return errInvalid("range [0x%x, +%d): address 0x%x is not mapped in this process (pass the address and length of a live buffer)%s", addr, n, next, deviceHint)
		}
		if why := v.special(); why != "" {
			return errInvalid("range [0x%x, +%d) lies in %s, which cannot be registered", addr, n, why)
		}
		if !v.read || !v.write {
			return errInvalid("range [0x%x, +%d) is not writable memory (%s): peers write into registered memory%s", addr, n, v, deviceHint)
		}
		if v.exec && !v.shared {
			// Registering moves private memory to a shared mapping, read
			// and write only: code run from it afterwards would crash.
			return errInvalid("range [0x%x, +%d) is executable memory (%s): register a data buffer, not memory holding code", addr, n, v)
		}
		next = v.end
	}
	if next < q {
		return errInvalid("range [0x%x, +%d): address 0x%x is not mapped in this process (pass the address and length of a live buffer)%s", addr, n, max(next, addr), deviceHint)
	}
	return nil
}

func describe(vmas []vma) string {
	var b bytes.Buffer
	for i, v := range vmas {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(v.String())
	}
	return b.String()
}

// owns says whether v is a mapping of the arena at offset equal to
// address. The caller holds mu.
func (a *arenaState) owns(v vma) bool {
	return a.file != nil && v.shared && v.inode == a.ino && v.dev == a.dev && v.offset == v.start
}

// shareFile leases memory that is already a shared mapping of one file:
// the file itself, if it can be opened and shared.
func shareFile(vmas []vma, addr, n uint64) (*Lease, error) {
	first := vmas[0]
	for _, v := range vmas[1:] {
		if v.inode != first.inode || v.dev != first.dev || v.offset-v.start != first.offset-first.start {
			return nil, errInvalid("range [0x%x, +%d) spans mappings of different files or offsets (%s): register each part on its own", addr, n, describe(vmas))
		}
	}
	f, err := os.OpenFile(fmt.Sprintf("/proc/self/map_files/%x-%x", first.start, first.end), os.O_RDWR, 0)
	if err != nil && first.path != "" && first.path[0] == '/' && !bytes.HasSuffix([]byte(first.path), []byte(" (deleted)")) {
		f, err = os.OpenFile(first.path, os.O_RDWR, 0)
	}
	if err != nil {
		return nil, errInvalid("range [0x%x, +%d) is a shared mapping of %q, which this process cannot open to share with a plugin (%v): opening a deleted or anonymous shared mapping needs CAP_CHECKPOINT_RESTORE; use private memory or allocate managed memory instead", addr, n, first.path, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil || st.Ino != first.inode {
		f.Close()
		return nil, errInvalid("range [0x%x, +%d): the file of the mapping %s changed while it was opened", addr, n, first)
	}
	off := first.offset + (addr - first.start)
	if err := shm.CheckShareable(f, off, int(n)); err != nil {
		f.Close()
		return nil, errInvalid("range [0x%x, +%d) is a shared mapping of %q: %v", addr, n, first.path, err)
	}
	return &Lease{File: f, Offset: off, How: "file", release: f.Close}, nil
}

// open creates the arena file. The caller holds mu.
func (a *arenaState) open() error {
	fd, err := unix.MemfdCreate("kvconnect:caller-memory", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return fmt.Errorf("callermem: memfd_create: %w", err)
	}
	f := os.NewFile(uintptr(fd), "memfd:kvconnect:caller-memory")
	if err := unix.Ftruncate(fd, arenaSize); err != nil {
		f.Close()
		return fmt.Errorf("callermem: sizing the arena: %w", err)
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|unix.F_SEAL_SEAL); err != nil {
		f.Close()
		return fmt.Errorf("callermem: sealing the arena: %w", err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		f.Close()
		return fmt.Errorf("callermem: %w", err)
	}
	a.file, a.ino = f, st.Ino
	a.dev = fmt.Sprintf("%02x:%02x", unix.Major(st.Dev), unix.Minor(st.Dev))
	return nil
}

// share moves the pages of [p, q) no lease holds yet into the arena and
// leases the range. The caller holds mu.
func (a *arenaState) share(p, q, addr uint64) (*Lease, error) {
	if a.file == nil {
		if err := a.open(); err != nil {
			return nil, err
		}
	}
	for _, r := range a.held.add(p, q) {
		if err := a.moveIn(r[0], r[1]); err != nil {
			// Put back what moved, and forget the range.
			for _, g := range a.held.remove(p, q) {
				a.keep(a.moveOut(g[0], g[1]))
			}
			a.closeIfIdle()
			return nil, err
		}
	}
	a.leases++
	return &Lease{File: a.file, Offset: addr, How: "arena", release: func() error { return a.release(p, q) }}, nil
}

func (a *arenaState) release(p, q uint64) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	var errs []error
	for _, g := range a.held.remove(p, q) {
		if err := a.keep(a.moveOut(g[0], g[1])); err != nil {
			errs = append(errs, err)
		}
	}
	a.leases--
	a.closeIfIdle()
	return errors.Join(errs...)
}

// keep holds again what moveOut could not move back: it is still the
// arena's mapping, listed by Held (a fork child remaps it), and keeps the
// arena open. The caller holds mu.
func (a *arenaState) keep(failed [][2]uint64, err error) error {
	for _, f := range failed {
		a.held.add(f[0], f[1])
	}
	return err
}

// closeIfIdle closes the arena once nothing is held: its pages are back
// in private memory (a page that could not be moved back keeps its
// mapping, which keeps the file alive). The caller holds mu.
func (a *arenaState) closeIfIdle() {
	if a.leases == 0 && a.held.empty() && a.file != nil {
		a.file.Close()
		a.file = nil
	}
}

// chunks splits [a, b) for moving: the first and last page alone (they
// may hold other data, so their copy-to-remap window is kept shortest),
// then the rest in moveChunk pieces.
func chunks(a, b uint64) [][2]uint64 {
	page := uint64(unix.Getpagesize())
	if b-a <= 2*page {
		var out [][2]uint64
		for x := a; x < b; x += page {
			out = append(out, [2]uint64{x, x + page})
		}
		return out
	}
	out := [][2]uint64{{a, a + page}, {b - page, b}}
	for x := a + page; x < b-page; x += moveChunk {
		out = append(out, [2]uint64{x, min(x+moveChunk, b-page)})
	}
	return out
}

// moveIn copies the private pages [a, b) into the arena at their address
// and maps the arena over them. The caller holds mu.
func (a *arenaState) moveIn(lo, hi uint64) error {
	fd := int(a.file.Fd())
	for _, c := range chunks(lo, hi) {
		if err := copyIn(fd, c[0], c[1]); err != nil {
			return err
		}
		if err := mapShared(fd, c[0], c[1]); err != nil {
			return err
		}
	}
	return nil
}

// copyIn writes the non-zero pages of [x, y) into fd at their address
// (zero pages stay holes, so untouched memory costs nothing).
func copyIn(fd int, x, y uint64) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			err = errInvalid("memory at [0x%x, 0x%x) became unreadable while it was being registered (was it freed?)", x, y)
		}
	}()
	page := uint64(len(zeroPage))
	run := x // start of the run of non-zero pages not yet written
	flush := func(end uint64) error {
		for run < end {
			n, err := unix.Pwrite(fd, bytesAt(run, end-run), int64(run))
			if err != nil {
				return fmt.Errorf("callermem: copying [0x%x, 0x%x) into the arena: %w", run, end, err)
			}
			run += uint64(n)
		}
		return nil
	}
	for pg := x; pg < y; pg += page {
		if bytes.Equal(bytesAt(pg, page), zeroPage) {
			if err := flush(pg); err != nil {
				return err
			}
			run = pg + page
		}
	}
	return flush(y)
}

// mapShared maps [x, y) of the arena over the same addresses.
func mapShared(fd int, x, y uint64) error {
	_, _, e := unix.Syscall6(unix.SYS_MMAP, uintptr(x), uintptr(y-x), unix.PROT_READ|unix.PROT_WRITE,
		unix.MAP_SHARED|unix.MAP_FIXED, uintptr(fd), uintptr(x))
	if e != 0 {
		return fmt.Errorf("callermem: mapping the arena over [0x%x, 0x%x): %w", x, y, e)
	}
	return nil
}

// moveOut turns the arena's mappings in [lo, hi) back into private
// memory with the same contents and frees the arena's pages. Parts that
// are no longer the arena's mapping (the caller unmapped or replaced its
// memory) are left alone. What could not be moved back (out of memory,
// the map count limit) stays the arena's mapping, its pages kept, and is
// returned in failed: the caller keeps it held. The caller holds mu.
func (a *arenaState) moveOut(lo, hi uint64) (failed [][2]uint64, err error) {
	vmas, err := readMaps(lo, hi)
	if err != nil {
		return [][2]uint64{{lo, hi}}, err // nothing known moved: keep it all
	}
	fd := int(a.file.Fd())
	var errs []error
	for _, v := range vmas {
		if !a.owns(v) {
			continue
		}
		for _, c := range chunks(max(lo, v.start), min(hi, v.end)) {
			if err := movePrivate(fd, c[0], c[1]); err != nil {
				errs = append(errs, err)
				failed = append(failed, c)
			}
		}
	}
	// Free the arena's pages, but for what is still mapped from it: a
	// hole punched there would read as zeros, the caller's data lost.
	free := func(x, y uint64) {
		if x >= y {
			return
		}
		if err := unix.Fallocate(fd, unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, int64(x), int64(y-x)); err != nil {
			errs = append(errs, fmt.Errorf("callermem: freeing [0x%x, 0x%x) of the arena: %w", x, y, err))
		}
	}
	slices.SortFunc(failed, func(x, y [2]uint64) int { return cmp.Compare(x[0], y[0]) })
	next := lo
	for _, f := range failed {
		free(next, f[0])
		next = f[1]
	}
	free(next, hi)
	return failed, errors.Join(errs...)
}

// movePrivate replaces the arena mapping [x, y) with a private copy of
// it (mremap of a fresh private mapping over it: atomic for other
// threads).
func movePrivate(fd int, x, y uint64) (err error) {
	n := y - x
	tmp, _, e := unix.Syscall6(unix.SYS_MMAP, 0, uintptr(n), unix.PROT_READ|unix.PROT_WRITE,
		unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_NORESERVE, ^uintptr(0), 0)
	if e != 0 {
		return fmt.Errorf("callermem: reserving %d bytes to move [0x%x, 0x%x) back: %w", n, x, y, e)
	}
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			unix.Syscall(unix.SYS_MUNMAP, tmp, uintptr(n), 0)
			err = fmt.Errorf("callermem: memory at [0x%x, 0x%x) became unreadable while it was moved back (was it unmapped?)", x, y)
		}
	}()
	page := uint64(len(zeroPage))
	// Only the file's data pages can hold anything but zeros; reading a
	// hole through the mapping would allocate it.
	for off := int64(x); off < int64(y); {
		data, err := unix.Seek(fd, off, unix.SEEK_DATA)
		if err != nil || data >= int64(y) {
			break // ENXIO: no data past off
		}
		hole, err := unix.Seek(fd, data, unix.SEEK_HOLE)
		if err != nil || hole > int64(y) {
			hole = int64(y)
		}
		for pg := uint64(data); pg < uint64(hole); pg += page {
			src := bytesAt(pg, page)
			if !bytes.Equal(src, zeroPage) {
				copy(bytesAt(uint64(tmp)+(pg-x), page), src)
			}
		}
		off = hole
	}
	_, _, e = unix.Syscall6(unix.SYS_MREMAP, tmp, uintptr(n), uintptr(n), unix.MREMAP_MAYMOVE|unix.MREMAP_FIXED, uintptr(x), 0)
	if e != 0 {
		unix.Syscall(unix.SYS_MUNMAP, tmp, uintptr(n), 0)
		return fmt.Errorf("callermem: moving [0x%x, 0x%x) back to private memory: %w", x, y, e)
	}
	return nil
}

// bytesAt is the n bytes at address addr of this process (memory that is
// not Go's: the caller's mapping).
func bytesAt(addr, n uint64) []byte {
	return unsafe.Slice((*byte)(*(*unsafe.Pointer)(unsafe.Pointer(&addr))), n)
}
