package connector

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"unsafe"

	"github.com/kvconnect/kvconnect/internal/callermem"
	"github.com/kvconnect/kvconnect/plugins"
	"github.com/kvconnect/kvconnect/units"
)

// RegisterMemory registers memory the caller already has, where it is:
// a Go slice, C memory, a Python bytearray or numpy array handed over as
// an address. It is published and reachable like an allocated region,
// and peers address it by its own address (Mooncake's
// peer_buffer_address). The caller keeps owning the memory: it must stay
// alive and must not be freed or resized until the region is freed.
//
// A plugin process reaches the memory without a copy per op: a shared
// mapping of a memfd or tmpfs file is reached through that file; private
// memory (the heap, anonymous mmaps) is moved in place into shared memory
// (its pages are copied once into a shared-memory file mapped at the
// same addresses; see internal/callermem). Free puts private memory back
// as it was, with its contents. Pages are the unit: the first and last
// page of mem may hold other data, which is copied along; a write to that
// other data by another thread while RegisterMemory runs could be lost,
// so register buffers that own their pages (a Go slice of 32 KiB or more,
// mmap'd memory, large malloc blocks) or make sure nothing else writes
// around them meanwhile. Memory that cannot be shared (unmapped,
// read-only, a stack, hugetlb, a shared mapping of a file on disk) and
// memory overlapping a registered region are refused with
// ErrInvalidArgument (overlap: also ErrAddressOverlap), naming what was
// found.
func (c *Connector) RegisterMemory(ctx context.Context, mem []byte) (*Region, error) {
	rs, err := c.RegisterMemoryBatch(ctx, [][]byte{mem})
	if err != nil {
		return nil, err
	}
	return rs[0], nil
}

// RegisterMemoryBatch registers many buffers as RegisterMemory does, all
// or none, with one round trip to each plugin for the whole batch: the
// way to register thousands of buffers (vLLM and SGLang register every
// KV buffer in one batch_register_memory call). The regions come back in
// the order of mems.
func (c *Connector) RegisterMemoryBatch(ctx context.Context, mems [][]byte) ([]*Region, error) {
	if err := c.usable(); err != nil {
		return nil, err
	}
	if len(mems) == 0 {
		return nil, nil
	}
	if err := c.checkNewMemory(mems); err != nil {
		return nil, err
	}
	regions := make([]*Region, 0, len(mems))
	release := func() {
		for _, r := range regions {
			r.release()
		}
	}
	for i, mem := range mems {
		l, err := callermem.Share(mem)
		if err != nil {
			release()
			return nil, fmt.Errorf("connector: RegisterMemory: buffer %d of %d: %w", i+1, len(mems), err)
		}
		id := c.newRegionID()
		regions = append(regions, c.newRegion(id, fmt.Sprintf("memory-%d", id), mem, l.File, l.Offset, func() {
			if err := l.Release(); err != nil {
				c.opts.log.Sugar().Warnf("putting registered memory back as private memory: %v", err)
			}
		}))
	}
	if err := c.registerAll(ctx, regions); err != nil {
		return nil, err
	}
	return regions, nil
}

// checkNewMemory refuses empty or oversized buffers and buffers that
// overlap each other or a registered region, before any memory is
// touched.
func (c *Connector) checkNewMemory(mems [][]byte) error {
	type span struct {
		i          int
		start, end uint64
	}
	spans := make([]span, 0, len(mems))
	for i, mem := range mems {
		if len(mem) == 0 || len(mem) > MaxRegionSize {
			return fmt.Errorf("connector: RegisterMemory: buffer %d of %d is %d bytes: must be between 1 byte and %s: %w", i+1, len(mems), len(mem), units.FormatSize(MaxRegionSize), ErrInvalidArgument)
		}
		start := uint64(uintptr(unsafe.Pointer(unsafe.SliceData(mem))))
		spans = append(spans, span{i, start, start + uint64(len(mem))})
		if e, _, err := c.local.Resolve(0, start, 1); err == nil {
			e.Release()
			return fmt.Errorf("connector: RegisterMemory: buffer %d of %d [0x%x, +%d) overlaps registered region %d: %w: %w", i+1, len(mems), start, len(mem), e.ID, ErrAddressOverlap, ErrInvalidArgument)
		}
		if e, _, err := c.local.Resolve(0, start+uint64(len(mem))-1, 1); err == nil {
			e.Release()
			return fmt.Errorf("connector: RegisterMemory: buffer %d of %d [0x%x, +%d) overlaps registered region %d: %w: %w", i+1, len(mems), start, len(mem), e.ID, ErrAddressOverlap, ErrInvalidArgument)
		}
	}
	slices.SortFunc(spans, func(a, b span) int {
		switch {
		case a.start < b.start:
			return -1
		case a.start > b.start:
			return 1
		}
		return 0
	})
	for k := 1; k < len(spans); k++ {
		if a, b := spans[k-1], spans[k]; b.start < a.end {
			return fmt.Errorf("connector: RegisterMemory: buffers %d [0x%x, 0x%x) and %d [0x%x, 0x%x) overlap: %w: %w", a.i+1, a.start, a.end, b.i+1, b.start, b.end, ErrAddressOverlap, ErrInvalidArgument)
		}
	}
	return nil
}

// registerAll registers regions with every transport up (one batch call
// to a transport that takes batches), then adds them to the local table
// and publishes them, all or none: on failure every region is released.
// A region that wholly contains a registered one is caught by the local
// table.
func (c *Connector) registerAll(ctx context.Context, regions []*Region) error {
	release := func() {
		for _, r := range regions {
			r.release()
		}
	}
	if err := c.lockRegions(ctx); err != nil {
		release()
		return err
	}
	defer c.unlockRegions()
	transports := c.active()
	trs := make([]plugins.Region, len(regions))
	for i, r := range regions {
		trs[i] = r.transportRegion()
	}
	var done []*activeTransport
	undo := func() {
		// Even when ctx ended, bounded: the region lock is held, and a wedged
		// plugin would otherwise hold every Alloc, Free and restart.
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), closeTimeout)
		defer cancel()
		for _, at := range done {
			deregisterAll(uctx, at.tr, regions)
		}
	}
	for _, at := range transports {
		if c.usableOn(at) != nil {
			continue // down: a restart registers every region anew
		}
		keys, err := registerWith(ctx, at.tr, trs)
		if err != nil {
			undo()
			release()
			return fmt.Errorf("connector: registering %d regions with transport %s: %w", len(regions), at.name, err)
		}
		done = append(done, at)
		c.mu.Lock()
		for i, r := range regions {
			r.keys[at.name] = keys[i]
		}
		c.mu.Unlock()
	}
	for i, r := range regions {
		if err := c.local.Add(uint64(r.id), r.addr, r.mem); err != nil {
			for _, added := range regions[:i] {
				c.local.Remove(context.WithoutCancel(ctx), uint64(added.id))
			}
			undo()
			release()
			return fmt.Errorf("connector: %w", err)
		}
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		for _, r := range regions {
			c.local.Remove(context.Background(), uint64(r.id))
		}
		release()
		return fmt.Errorf("connector: %w", ErrClosed)
	}
	for _, r := range regions {
		c.regions[r.id] = r
	}
	c.mu.Unlock()
	c.republish()
	return nil
}

// registerWith registers rs with tr: in one call when it takes batches,
// else one by one (undoing the ones done on failure).
func registerWith(ctx context.Context, tr plugins.Transport, rs []plugins.Region) ([][]byte, error) {
	if b, ok := tr.(plugins.BatchRegistrar); ok && len(rs) > 1 {
		return b.RegisterRegions(ctx, rs)
	}
	keys := make([][]byte, len(rs))
	for i, r := range rs {
		key, err := tr.RegisterRegion(ctx, r)
		if err != nil {
			uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), closeTimeout)
			for _, done := range rs[:i] {
				tr.DeregisterRegion(uctx, done.ID)
			}
			cancel()
			return nil, err
		}
		keys[i] = key
	}
	return keys, nil
}

// deregisterAll deregisters regions from tr, in one call when it takes
// batches.
func deregisterAll(ctx context.Context, tr plugins.Transport, regions []*Region) error {
	ids := make([]plugins.RegionID, len(regions))
	for i, r := range regions {
		ids[i] = r.id
	}
	if b, ok := tr.(plugins.BatchRegistrar); ok && len(ids) > 1 {
		return b.DeregisterRegions(ctx, ids)
	}
	var errs []error
	for _, id := range ids {
		if err := tr.DeregisterRegion(ctx, id); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
