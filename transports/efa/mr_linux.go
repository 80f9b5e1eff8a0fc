//go:build linux && cgo

package efa

import (
	"context"
	"fmt"
	"strings"
	"unsafe"

	"github.com/kvconnect/kvconnect/plugins"
)

// register registers mem and returns its handle and the key fields peers
// need: memory key (or raw key), RMA base and size.
func (f *fabric) register(what string, mem []byte, access uint64) (*mrHandle, regionKey, error) {
	// Requested keys (no FI_MR_PROV_KEY) are never reused, so a peer
	// holding a stale key cannot reach a later registration.
	f.nextKey++
	h, rc := f.c.mrReg(mem, access, f.nextKey)
	if rc != 0 {
		return nil, regionKey{}, &plugins.InitError{Transport: Name, Step: plugins.StepRegisterMemory, NativeCode: int64(rc), NativeName: fiName(rc),
			Cause: fmt.Sprintf("fi_mr_reg of %s (%d bytes, mr_mode %s) failed: %s", what, len(mem), mrModeString(f.info.MRMode), fiStrerror(rc)),
			Hints: []string{"check the locked-memory limit (ulimit -l; LimitMEMLOCK=infinity for services, --ulimit memlock=-1 for containers)",
				"a provider out of memory keys needs fewer, larger regions"},
			Err: fmt.Errorf("efa: register %s: %w", what, plugins.ErrUnavailable)}
	}
	k := regionKey{Key: h.key, Size: uint64(len(mem))}
	if f.info.MRMode&mrVirtAddr != 0 {
		// The RMA address is this process's virtual address: in a plugin
		// process that is where the plugin mapped the region, not
		// Region.Addr (the host's).
		k.Flags |= keyFlagVirtAddr
		k.Base = uint64(uintptr(unsafe.Pointer(unsafe.SliceData(mem))))
	}
	if f.info.MRMode&mrRaw != 0 && (f.info.MRKeySize > 8 || h.key == fiKeyNotAvail) {
		if rc := f.c.mrRawKey(h); rc != 0 {
			f.c.mrClose(h)
			return nil, regionKey{}, fmt.Errorf("efa: fi_mr_raw_attr of %s: %s (%s %d): %w", what, fiStrerror(rc), fiName(rc), rc, plugins.ErrUnavailable)
		}
		k.Flags |= keyFlagRaw
		k.Raw = h.raw
		k.Base = h.base
	}
	h.base = k.Base
	return h, k, nil
}

// mrModeString names the bits of an mr_mode.
func mrModeString(m uint64) string {
	names := []struct {
		bit  uint64
		name string
	}{
		{mrLocal, "FI_MR_LOCAL"}, {mrVirtAddr, "FI_MR_VIRT_ADDR"}, {mrAllocated, "FI_MR_ALLOCATED"},
		{mrProvKey, "FI_MR_PROV_KEY"}, {mrEndpoint, "FI_MR_ENDPOINT"}, {mrRaw, "FI_MR_RAW"},
		{mrRMAEvent, "FI_MR_RMA_EVENT"}, {mrMMUNotify, "FI_MR_MMU_NOTIFY"}, {mrHMEM, "FI_MR_HMEM"},
		{mrCollective, "FI_MR_COLLECTIVE"},
	}
	var out []string
	for _, n := range names {
		if m&n.bit != 0 {
			out = append(out, n.name)
			m &^= n.bit
		}
	}
	if m != 0 {
		out = append(out, fmt.Sprintf("0x%x", m))
	}
	if len(out) == 0 {
		return "none"
	}
	return strings.Join(out, "|")
}

// registerMR registers mem as region id and returns its published key.
func (f *fabric) registerMR(ctx context.Context, id uint64, mem []byte) ([]byte, error) {
	var key []byte
	err := f.do(func() error {
		f.mrMu.RLock()
		_, dup := f.mrs[id]
		f.mrMu.RUnlock()
		if dup {
			return fmt.Errorf("efa: region %d already registered: %w", id, plugins.ErrInvalidArgument)
		}
		if len(f.statusFree) == 0 {
			return fmt.Errorf("efa: region %d: all %d status slots in use (transports.efa.max_regions): %w", id, f.opts.MaxRegions, plugins.ErrInvalidArgument)
		}
		h, k, err := f.register(fmt.Sprintf("region %d", id), mem, accessRegion)
		if err != nil {
			return err
		}
		slot := f.statusFree[len(f.statusFree)-1]
		f.statusFree = f.statusFree[:len(f.statusFree)-1]
		k.Slot = slot
		k.Token = f.tokenBase + f.nextKey
		if k.Token == 0 {
			k.Token = 1
		}
		f.status.setWord(slot, k.Token)
		f.regionSlots[id] = slot
		f.mrMu.Lock()
		f.mrs[id] = h
		f.mrMu.Unlock()
		key = k.marshal()
		return nil
	})
	return key, err
}

// deregisterMR clears region id's status slot and closes its registration.
func (f *fabric) deregisterMR(ctx context.Context, id uint64) error {
	return f.do(func() error {
		f.mrMu.Lock()
		h := f.mrs[id]
		delete(f.mrs, id)
		f.mrMu.Unlock()
		if h == nil {
			return fmt.Errorf("efa: region %d: %w", id, plugins.ErrUnknownRegion)
		}
		if slot, ok := f.regionSlots[id]; ok {
			f.status.setWord(slot, 0)
			f.statusFree = append(f.statusFree, slot)
			delete(f.regionSlots, id)
		}
		if rc := f.c.mrClose(h); rc != 0 {
			return fmt.Errorf("efa: closing the registration of region %d: %s (%s %d): %w", id, fiStrerror(rc), fiName(rc), rc, plugins.ErrInternal)
		}
		return nil
	})
}
