package efa

import (
	"fmt"
	"strings"
	"time"

	"github.com/kvconnect/kvconnect/plugins"
	"github.com/kvconnect/kvconnect/units"
)

// DefaultProvider is the libfabric provider used when the config names
// none: AWS's Elastic Fabric Adapter.
const DefaultProvider = "efa"

// DefaultLibrary is the libfabric shared library loaded at Init.
const DefaultLibrary = "libfabric.so.1"

// Options is the efa transport's config subtree (transports.efa).
type Options struct {
	// Provider is the libfabric provider (fi_info -l): "efa" on AWS,
	// "tcp;ofi_rxm" or "shm" to run the same code over software providers.
	Provider string `json:"provider"`
	// Domain selects the libfabric domain (fi_info's "domain:", e.g.
	// "rdmap16s27-rdm" for an EFA device, "lo" or "eth0" for tcp). Empty
	// takes InitRequest.DeviceName, and when that is empty too the
	// provider's first domain.
	Domain string `json:"domain"`
	// Library is the libfabric shared object to load (a soname or a path,
	// e.g. /opt/amazon/efa/lib64/libfabric.so.1 from the AWS EFA installer).
	Library string `json:"library"`
	// MaxRegions bounds how many regions can be registered at once (the
	// size of the region status table peers read, 8 bytes per region).
	MaxRegions int `json:"max_regions"`
	// MaxInflight bounds the RMA operations posted to the provider at once
	// (it is also capped by the provider's transmit queue size).
	MaxInflight int `json:"max_inflight"`
	// ChunkSize splits ops larger than it into several RMA operations that
	// are in flight together. 0 splits only at the provider's max_msg_size.
	ChunkSize units.Size `json:"chunk_size"`
	// OpTimeout fails the ops to a peer that completed nothing for this
	// long (a dead or wedged peer).
	OpTimeout units.Duration `json:"op_timeout"`
	// VerifyRegions checks, before a batch posts, that every remote region
	// it targets is still registered at the peer (one 8-byte RMA read of
	// the peer's region status table per region and batch). "auto" (the
	// default) does so for the shm provider only: libfabric 1.17's shm
	// drops an RMA with a stale key without a completion and then stalls
	// every later completion of the endpoint. "always" and "never" force
	// it. Without it a stale key is still detected: the op fails (or
	// stalls) and the peer's table is read to say why.
	VerifyRegions string `json:"verify_regions"`
	// ProgressInterval is the longest an idle transport waits before it
	// progresses the provider again. Providers with manual progress (such
	// as tcp;ofi_rxm and shm) only serve incoming RMA while the target
	// calls into them, so this bounds how long a peer's op can wait on an
	// idle target when the provider cannot wake it. 0 (the default) picks
	// 100ms when the completion queue has a wait descriptor the provider
	// signals on incoming data (tcp;ofi_rxm), else 1ms (shm, whose peers
	// only set a flag in shared memory, and CQs without a descriptor).
	ProgressInterval units.Duration `json:"progress_interval"`
}

// DefaultOptions are the options used for keys the config leaves out.
func DefaultOptions() Options {
	return Options{
		Provider:      DefaultProvider,
		Library:       DefaultLibrary,
		MaxInflight:   256,
		MaxRegions:    65536,
		OpTimeout:     units.Duration(30 * time.Second),
		VerifyRegions: "auto",
	}
}

// maxChunk is the largest chunk_size accepted; larger ops are split.
const maxChunk = 1 << 30

func (o Options) validate() error {
	bad := func(key string, v any, allowed string) error {
		return fmt.Errorf("efa: option transports.efa.%s = %v: %s: %w", key, v, allowed, plugins.ErrInvalidArgument)
	}
	switch {
	case strings.TrimSpace(o.Provider) == "":
		return bad("provider", `""`, `must name a libfabric provider such as "efa", "tcp;ofi_rxm" or "shm" (fi_info -l lists them)`)
	case strings.ContainsAny(o.Provider, " \t\n\x00") || len(o.Provider) > 255:
		return bad("provider", fmt.Sprintf("%q", o.Provider), `must be a provider name without spaces, e.g. "efa" or "tcp;ofi_rxm"`)
	case strings.ContainsRune(o.Domain, 0):
		return bad("domain", fmt.Sprintf("%q", o.Domain), "must not contain NUL")
	case strings.TrimSpace(o.Library) == "" || strings.ContainsRune(o.Library, 0):
		return bad("library", fmt.Sprintf("%q", o.Library), "must name the libfabric shared object, e.g. libfabric.so.1")
	case o.MaxRegions < 1 || o.MaxRegions > 1<<24:
		return bad("max_regions", o.MaxRegions, "must be between 1 and 16777216")
	case o.MaxInflight < 1 || o.MaxInflight > 65536:
		return bad("max_inflight", o.MaxInflight, "must be between 1 and 65536")
	case o.ChunkSize != 0 && (o.ChunkSize < 4096 || o.ChunkSize > maxChunk):
		return bad("chunk_size", units.FormatSize(uint64(o.ChunkSize)), "must be 0 (no splitting) or between 4KiB and 1GiB")
	case o.OpTimeout <= 0:
		return bad("op_timeout", time.Duration(o.OpTimeout), "must be positive")
	case o.VerifyRegions != "auto" && o.VerifyRegions != "always" && o.VerifyRegions != "never":
		return bad("verify_regions", fmt.Sprintf("%q", o.VerifyRegions), `must be "auto", "always" or "never"`)
	case o.ProgressInterval != 0 && (o.ProgressInterval < units.Duration(10*time.Microsecond) || o.ProgressInterval > units.Duration(time.Second)):
		return bad("progress_interval", time.Duration(o.ProgressInterval), "must be 0 (automatic) or between 10us and 1s")
	}
	return nil
}

// verifyRegions resolves VerifyRegions for the provider in use.
func (o Options) verifyRegions(provider string) bool {
	switch o.VerifyRegions {
	case "always":
		return true
	case "never":
		return false
	}
	return provider == "shm"
}

// progressInterval resolves ProgressInterval: waitFD says the completion
// queue has a wait descriptor.
func (o Options) progressInterval(provider string, waitFD bool) time.Duration {
	switch {
	case o.ProgressInterval != 0:
		return time.Duration(o.ProgressInterval)
	case waitFD && provider != "shm":
		return 100 * time.Millisecond
	}
	return time.Millisecond
}
