package connector

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"unsafe"

	"github.com/kvconnect/kvconnect/internal/shm"
	"github.com/kvconnect/kvconnect/internal/units"
	"github.com/kvconnect/kvconnect/plugins"
)

// Region is registered shared memory: local ops read and write it, and
// peers may read and write it within its bounds.
type Region struct {
	c    *Connector
	id   RegionID
	name string
	seg  *shm.Segment
	mem  []byte
	addr uint64
	keys map[string][]byte // per transport, as RegisterRegion returned

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

// MaxRegionSize bounds one Alloc.
const MaxRegionSize = shm.MaxSize

// Alloc allocates a shared-memory region of size bytes, registers it with
// the transport and publishes it to peers.
func (c *Connector) Alloc(ctx context.Context, size int) (*Region, error) {
	if err := c.usable(); err != nil {
		return nil, err
	}
	if size <= 0 || size > MaxRegionSize {
		return nil, fmt.Errorf("connector: Alloc(%d): size must be between 1 byte and %s: %w", size, units.FormatSize(MaxRegionSize), ErrInvalidArgument)
	}
	c.mu.Lock()
	c.nextRegion++
	id := c.nextRegion
	c.mu.Unlock()
	name := fmt.Sprintf("region-%d", id)
	seg, err := shm.New(name, size)
	if err != nil {
		return nil, fmt.Errorf("connector: Alloc(%s): %w", units.FormatSize(uint64(size)), err)
	}
	mem := seg.Bytes()
	r := &Region{c: c, id: id, name: name, seg: seg, mem: mem, addr: uint64(uintptr(unsafe.Pointer(&mem[0]))), keys: map[string][]byte{}}
	c.regMu.Lock()
	defer c.regMu.Unlock()
	transports := c.active()
	for i, at := range transports {
		if c.usableOn(at) != nil {
			continue // down: a restart registers every region anew
		}
		key, err := at.tr.RegisterRegion(ctx, plugins.Region{ID: id, Addr: r.addr, Mem: mem, File: seg.File()})
		if err != nil {
			for _, done := range transports[:i] {
				done.tr.DeregisterRegion(context.Background(), id)
			}
			seg.Close()
			return nil, fmt.Errorf("connector: registering %s with transport %s: %w", units.FormatSize(uint64(size)), at.name, err)
		}
		c.mu.Lock()
		r.keys[at.name] = key
		c.mu.Unlock()
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		r.release()
		return nil, fmt.Errorf("connector: %w", ErrClosed)
	}
	c.regions[id] = r
	c.mu.Unlock()
	return r, nil
}

// Free deregisters the region (waiting for ops on it to end) and unmaps
// it. The memory must not be used afterwards. If ctx ends while ops still
// use the region, Free returns the error and keeps the memory mapped; call
// Free again to finish, or Close releases it.
func (r *Region) Free(ctx context.Context) error {
	c := r.c
	c.regMu.Lock()
	defer c.regMu.Unlock()
	c.mu.Lock()
	_, registered := c.regions[r.id]
	_, draining := c.draining[r.id]
	delete(c.regions, r.id)
	c.mu.Unlock()
	if !registered && !draining {
		return nil // already freed, or released by Close
	}
	var errs []error
	for _, at := range c.active() {
		if c.usableOn(at) != nil {
			continue // gone: it cannot touch the memory
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
	r.once.Do(func() { r.seg.Close() })
}

// regionAt finds the local region holding [addr, addr+length).
func (c *Connector) regionAt(addr, length uint64) (*Region, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, r := range c.regions {
		if addr >= r.addr && addr-r.addr < uint64(len(r.mem)) {
			if length > uint64(len(r.mem)) || addr-r.addr > uint64(len(r.mem))-length {
				return nil, fmt.Errorf("connector: local range [0x%x, +%d) runs past the end of region %d (%d bytes at 0x%x): %w", addr, length, r.id, len(r.mem), r.addr, ErrOutOfBounds)
			}
			return r, nil
		}
	}
	return nil, fmt.Errorf("connector: local address 0x%x is in no registered region (Alloc the memory first): %w", addr, ErrUnknownRegion)
}

// remoteRegionAt finds the peer's buffer holding [addr, addr+length) in its
// descriptor.
func remoteRegionAt(d *SegmentDescriptor, addr, length uint64) (BufferDescriptor, error) {
	i := sort.Search(len(d.Buffers), func(i int) bool { return d.Buffers[i].Addr > addr }) - 1
	if i >= 0 {
		b := d.Buffers[i]
		if addr-b.Addr < b.Length {
			if length > b.Length || addr-b.Addr > b.Length-length {
				return b, fmt.Errorf("connector: remote range [0x%x, +%d) runs past the end of %s's region %d: %w", addr, length, d.Name, b.ID, ErrOutOfBounds)
			}
			return b, nil
		}
	}
	return BufferDescriptor{}, fmt.Errorf("connector: remote address 0x%x is in no region %s published: %w", addr, d.Name, ErrUnknownRegion)
}
