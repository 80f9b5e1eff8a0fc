package connector

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"unsafe"

	"github.com/kvconnect/kvconnect/internal/shm"
	"github.com/kvconnect/kvconnect/plugins"
	"github.com/kvconnect/kvconnect/units"
)

// Region is registered shared memory: local ops read and write it, and
// peers may read and write it within its bounds. Its memory belongs to
// the caller until Free; see the package's concurrency notes.
//
// A region does not cost a file descriptor or a mapping of its own: an
// allocated one is a piece of a shared slab (or, when large, a memfd of
// its own), and regions of one caller's file share the node's one view of
// it; each file crosses to a plugin once.
type Region struct {
	c    *Connector
	id   RegionID
	name string
	mem  []byte
	addr uint64
	// file backs mem, which starts at fileOffset within it.
	file       *os.File
	fileOffset uint64
	free       func()            // returns the memory to the pool or the file view
	keys       map[string][]byte // per transport, as RegisterRegion returned

	once sync.Once
}

// ID is the region's id, which peers use to address it.
func (r *Region) ID() RegionID { return r.id }

// Bytes is the region's memory.
func (r *Region) Bytes() []byte { return r.mem }

// Addr is the region's base address as published to peers (Mooncake's
// buffer address).
func (r *Region) Addr() uint64 { return r.addr }

// Len is the region's size in bytes.
func (r *Region) Len() int { return len(r.mem) }

// Backing is the shared-memory file that backs the region's memory and
// the offset of its first byte in it (for bindings that must remap the
// memory in a forked child). The file belongs to the node: do not close
// it, and do not use it after Free.
func (r *Region) Backing() (f *os.File, offset uint64) { return r.file, r.fileOffset }

// MaxRegionSize bounds one region.
const MaxRegionSize = shm.MaxSize

// Alloc allocates a shared-memory region of size bytes (a sealed memfd),
// registers it with every transport up and publishes it to peers.
func (c *Connector) Alloc(ctx context.Context, size int) (*Region, error) {
	rs, err := c.AllocBatch(ctx, []int{size})
	if err != nil {
		return nil, err
	}
	return rs[0], nil
}

// AllocBatch allocates one region per size, as Alloc does, all or none,
// registering them with one round trip to each plugin for the whole
// batch: the way to allocate thousands of regions.
func (c *Connector) AllocBatch(ctx context.Context, sizes []int) ([]*Region, error) {
	if err := c.usable(); err != nil {
		return nil, err
	}
	regions := make([]*Region, 0, len(sizes))
	fail := func(err error) ([]*Region, error) {
		for _, r := range regions {
			r.release()
		}
		return nil, err
	}
	for i, size := range sizes {
		if size <= 0 || size > MaxRegionSize {
			return fail(fmt.Errorf("connector: Alloc: size %d of %d is %d: must be between 1 byte and %s: %w", i+1, len(sizes), size, units.FormatSize(MaxRegionSize), ErrInvalidArgument))
		}
		id := c.newRegionID()
		name := fmt.Sprintf("region-%d", id)
		piece, err := c.pool.Alloc(name, size)
		if err != nil {
			return fail(fmt.Errorf("connector: Alloc(%s): %w", units.FormatSize(uint64(size)), err))
		}
		regions = append(regions, c.newRegion(id, name, piece.Bytes(), piece.File(), piece.FileOffset(), func() { piece.Free() }))
	}
	if len(regions) == 0 {
		return nil, nil
	}
	if err := c.registerAll(ctx, regions); err != nil {
		return nil, err
	}
	return regions, nil
}

// RegisterFile registers length bytes at offset of shared memory the
// caller owns: a memfd (sealed against shrinking, F_SEAL_SHRINK), or a
// file on tmpfs (/dev/shm) or hugetlbfs. It is published and reachable
// like an allocated region. The node maps its own view of the range and
// duplicates f's descriptor, so the caller keeps f and may close it; Free
// releases the node's mapping. A file that cannot be shared with a plugin
// process (a file on disk, an unsealed memfd, a range past the file's end)
// is refused with ErrInvalidArgument saying why. A tmpfs or hugetlbfs file
// cannot be sealed: it must not shrink while it is registered.
//
// Regions of one file share one descriptor and one mapping of the whole
// file (however many descriptors the caller opened for it), so a file
// may hold many thousands of regions; their ranges may not overlap.
func (c *Connector) RegisterFile(ctx context.Context, f *os.File, offset uint64, length int) (*Region, error) {
	if err := c.usable(); err != nil {
		return nil, err
	}
	if f == nil {
		return nil, fmt.Errorf("connector: RegisterFile: nil file: %w", ErrInvalidArgument)
	}
	if err := shm.CheckShareable(f, offset, length); err != nil {
		return nil, fmt.Errorf("connector: RegisterFile(%s, offset %d, %d bytes): %v: %w", f.Name(), offset, length, err, ErrInvalidArgument)
	}
	v, err := c.views.acquire(f, offset, length)
	if errors.Is(err, ErrUnavailable) {
		return nil, fmt.Errorf("connector: RegisterFile(%s): %w", f.Name(), err)
	}
	if err != nil {
		return nil, fmt.Errorf("connector: RegisterFile(%s, offset %d, %d bytes): %v: %w", f.Name(), offset, length, err, ErrInvalidArgument)
	}
	mem := v.seg.Bytes()[offset : offset+uint64(length) : offset+uint64(length)]
	if err := shm.Populate(mem); err != nil {
		c.views.release(v)
		return nil, fmt.Errorf("connector: RegisterFile(%s, offset %d, %d bytes): %v: %w", f.Name(), offset, length, err, ErrResourceExhausted)
	}
	id := c.newRegionID()
	return c.register(ctx, id, fmt.Sprintf("file-%d", id), mem, v.seg.File(), offset, func() { c.views.release(v) })
}

func (c *Connector) newRegionID() RegionID {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.nextRegion++
	return c.nextRegion
}

// newRegion makes the Region for mem (at fileOffset of file), not yet
// registered; free gives its memory back.
func (c *Connector) newRegion(id RegionID, name string, mem []byte, file *os.File, fileOffset uint64, free func()) *Region {
	return &Region{c: c, id: id, name: name, mem: mem, addr: uint64(uintptr(unsafe.Pointer(&mem[0]))),
		file: file, fileOffset: fileOffset, free: free, keys: map[string][]byte{}}
}

// register registers mem (at fileOffset of file) with every transport up,
// then publishes it. It calls free on failure.
func (c *Connector) register(ctx context.Context, id RegionID, name string, mem []byte, file *os.File, fileOffset uint64, free func()) (*Region, error) {
	r := c.newRegion(id, name, mem, file, fileOffset, free)
	if err := c.registerAll(ctx, []*Region{r}); err != nil {
		return nil, err
	}
	return r, nil
}

// transportRegion is r as a transport registers it.
func (r *Region) transportRegion() plugins.Region {
	return plugins.Region{ID: r.id, Addr: r.addr, Mem: r.mem, File: r.file, FileOffset: r.fileOffset}
}

// Free deregisters the region (waiting for ops on it to end) and unmaps
// it. The memory must not be used afterwards. If ctx ends while ops still
// use the region, Free returns the error and keeps the memory mapped; call
// Free again to finish, or Close releases it.
func (r *Region) Free(ctx context.Context) error {
	c := r.c
	if err := c.lockRegions(ctx); err != nil {
		return err // still registered and mapped: call Free again
	}
	defer c.unlockRegions()
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil // Shutdown releases it (or did)
	}
	_, registered := c.regions[r.id]
	_, draining := c.draining[r.id]
	delete(c.regions, r.id)
	// Shutdown waits for a Free under way, then releases what it left
	// draining: a deregistration that Shutdown's closing of the
	// transports cuts off leaves nothing mapped.
	c.wg.Add(1)
	c.mu.Unlock()
	defer c.wg.Done()
	if !registered && !draining {
		return nil // already freed
	}
	if registered {
		c.republish()
	}
	if registered {
		// Local lookups hold a region only for an instant.
		c.local.Remove(ctx, uint64(r.id))
	}
	var errs []error
	for _, at := range c.active() {
		if err := c.usableOn(at); err != nil {
			if errors.Is(err, ErrClosed) {
				// Shutdown began after this Free did: the transports are
				// still up until it closes them, and may run ops on the
				// region. Shutdown releases it after that (it waits for
				// this Free, then takes what is draining).
				errs = append(errs, fmt.Errorf("connector: freeing region %d: %w", r.id, err))
				break
			}
			continue // crashed: its process is gone, it cannot touch the memory
		}
		err := at.tr.DeregisterRegion(ctx, r.id)
		if err != nil && !(draining && errors.Is(err, ErrUnknownRegion)) {
			errs = append(errs, fmt.Errorf("connector: freeing region %d on %s: %w", r.id, at.name, err))
		}
	}
	if len(errs) > 0 {
		// Keep the mapping: an op may still use it. Close releases it.
		c.mu.Lock()
		c.draining[r.id] = r
		c.mu.Unlock()
		return errors.Join(errs...)
	}
	c.mu.Lock()
	delete(c.draining, r.id)
	c.mu.Unlock()
	r.release()
	return nil
}

func (r *Region) release() {
	r.once.Do(r.free)
}

// regionAt finds the local region holding [addr, addr+length).
func (c *Connector) regionAt(addr, length uint64) (*Region, error) {
	e, _, err := c.local.Resolve(0, addr, length)
	if err != nil {
		if errors.Is(err, ErrUnknownRegion) {
			return nil, fmt.Errorf("connector: local address 0x%x is in no registered region (Alloc or RegisterFile the memory first): %w", addr, ErrUnknownRegion)
		}
		return nil, fmt.Errorf("connector: local range [0x%x, +%d): %w", addr, length, err)
	}
	e.Release()
	c.mu.Lock()
	r := c.regions[RegionID(e.ID)]
	c.mu.Unlock()
	if r == nil {
		return nil, fmt.Errorf("connector: local address 0x%x: region %d is being freed: %w", addr, e.ID, ErrUnknownRegion)
	}
	return r, nil
}

// dupFile duplicates f's descriptor (close-on-exec).
func dupFile(f *os.File) (*os.File, error) {
	sc, err := f.SyscallConn()
	if err != nil {
		return nil, err
	}
	var fd int
	var derr error
	if err := sc.Control(func(raw uintptr) { fd, derr = dupCloexec(int(raw)) }); err != nil {
		return nil, err
	}
	if derr != nil {
		return nil, derr
	}
	return os.NewFile(uintptr(fd), f.Name()), nil
}
