// Package rdma is kvconnect's RDMA (InfiniBand / RoCE) transport. So far
// it is the preflight: Init probes the host the way a person debugging it
// would (is libibverbs installed, does ibv_get_device_list work, which
// devices exist, is the port ACTIVE, is there a usable GID, can the
// /dev/infiniband/uverbsN node be opened, is the memlock limit high
// enough) and turns the first failure into a *plugins.InitError naming
// the step, the native code, the cause and what to do. The RDMA data path
// is not built yet: on a host where every check passes, Init says so and
// returns an error wrapping plugins.ErrUnavailable, so the fallback chain
// moves on.
//
// Device state comes from sysfs (<sysfs_root>/class/infiniband/...), under
// a root that tests point at fixture trees in testdata/. libibverbs is
// loaded with dlopen at run time (cgo, Linux only; other builds report it
// unavailable), so the plugin starts on hosts without it. Probe is the same
// preflight without a transport, for kvconnect doctor.
package rdma

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"go.uber.org/zap"

	"github.com/kvconnect/kvconnect/plugins"
)

// Name is the transport's name in configs and descriptors.
const Name = "rdma"

// Version is the transport implementation's version.
const Version = "0.1.0"

var _ plugins.Transport = (*Transport)(nil)

// Transport is the rdma transport. Create it with New.
type Transport struct {
	mu     sync.Mutex
	closed bool
	// loader and memlock replace the real library loader and memlock
	// reader in tests (nil = the real ones).
	loader  Loader
	memlock func() Memlock
}

// New returns an rdma transport. It does nothing until Init.
func New() *Transport { return &Transport{} }

// Info describes the transport.
func (t *Transport) Info(ctx context.Context) (plugins.Info, error) {
	return plugins.Info{
		Name:         Name,
		Version:      Version,
		APIVersion:   plugins.APIVersion,
		Capabilities: plugins.CapRead | plugins.CapWrite | plugins.CapAbsoluteAddress,
	}, nil
}

// Init decodes the options (transports.rdma) and runs the preflight. It
// always fails for now: with the first failing check's diagnosis, or, when
// every check passes, with a StepDataPath error saying the devices look
// usable but the data path is not built yet. Both wrap ErrUnavailable; bad
// options wrap ErrInvalidArgument.
func (t *Transport) Init(ctx context.Context, req plugins.InitRequest) (plugins.InitResult, error) {
	t.mu.Lock()
	closed := t.closed
	t.mu.Unlock()
	if closed {
		return plugins.InitResult{}, fmt.Errorf("rdma: Init after Close: %w", plugins.ErrClosed)
	}
	opts := DefaultOptions()
	if err := plugins.DecodeOptions(Name, req.Options, &opts); err != nil {
		return plugins.InitResult{}, configError(err)
	}
	if err := opts.validate(); err != nil {
		return plugins.InitResult{}, configError(err)
	}
	log := req.Logger
	if log == nil {
		log = zap.NewNop()
	}
	r := Probe(ctx, ProbeOptions{DeviceName: req.DeviceName, Options: opts, Loader: t.loader, Memlock: t.memlock})
	for _, d := range r.Devices {
		log.Debug("rdma device", zap.String("device", d.Name), zap.String("summary", d.summary()))
	}
	for _, n := range r.Notes {
		log.Info("rdma preflight", zap.String("note", n))
	}
	if r.Diagnosis != nil {
		return plugins.InitResult{}, r.Diagnosis
	}
	return plugins.InitResult{}, notBuilt(&r)
}

// notBuilt is Init's answer when the preflight passed.
func notBuilt(r *Report) *plugins.InitError {
	var devs []string
	for _, n := range r.Usable {
		d := r.Device(n)
		devs = append(devs, fmt.Sprintf("%s (port %d %s, %s, GID index %d %s)",
			d.Name, d.Port, d.port(d.Port).State.Name, d.port(d.Port).LinkLayer, d.GIDIndex, d.GID.Addr))
	}
	verb := "looks"
	if len(devs) > 1 {
		verb = "look"
	}
	return &plugins.InitError{
		Transport: Name,
		Step:      plugins.StepDataPath,
		Cause: fmt.Sprintf("RDMA preflight passed: %s %s usable, but the RDMA data path is not built yet",
			strings.Join(devs, ", "), verb),
		Hints: []string{
			"the connector's fallback chain moves on to the next transport (default for rdma: tcp); set protocol tcp to skip rdma until its data path lands",
			hintDoctor,
		},
		Err: plugins.ErrUnavailable,
	}
}

func (t *Transport) notUp() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return fmt.Errorf("rdma: %w", plugins.ErrClosed)
	}
	return fmt.Errorf("rdma: no data path yet: %w", plugins.ErrNotInitialized)
}

// RegisterRegion fails: the rdma transport has no data path yet.
func (t *Transport) RegisterRegion(ctx context.Context, r plugins.Region) ([]byte, error) {
	return nil, t.notUp()
}

// DeregisterRegion fails: the rdma transport has no data path yet.
func (t *Transport) DeregisterRegion(ctx context.Context, id plugins.RegionID) error {
	return t.notUp()
}

// Connect fails: the rdma transport has no data path yet.
func (t *Transport) Connect(ctx context.Context, peer plugins.PeerInfo) (plugins.PeerID, error) {
	return 0, t.notUp()
}

// Disconnect fails: the rdma transport has no data path yet.
func (t *Transport) Disconnect(ctx context.Context, id plugins.PeerID) error {
	return t.notUp()
}

// Transfer fails every op: the rdma transport has no data path yet.
func (t *Transport) Transfer(ctx context.Context, peer plugins.PeerID, ops []plugins.Op, results []plugins.OpResult) error {
	err := t.notUp()
	plugins.FillResults(results, err)
	return err
}

// Close marks the transport closed. It is idempotent.
func (t *Transport) Close(ctx context.Context) error {
	t.mu.Lock()
	t.closed = true
	t.mu.Unlock()
	return nil
}
