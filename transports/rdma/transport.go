// Package rdma is kvconnect's RDMA (InfiniBand / RoCE) transport: a
// preflight of the host, then the ucx transport's data path restricted to
// RDMA lanes.
//
// Init first probes the host the way a person debugging it would (is
// libibverbs installed, does ibv_get_device_list work, which devices
// exist, is the port ACTIVE, is there a usable GID, can the
// /dev/infiniband/uverbsN node be opened, is the memlock limit high
// enough) and turns the first failure into a *plugins.InitError naming
// the step, the native code, the cause and what to do. When every check
// passes it brings up the data path: the same UCX code as the ucx
// transport (transports/internal/ucxpath), with UCX's RDMA lanes only (rc and ud by
// default, dc on request, over verbs or mlx5), net devices derived from
// device_name ("mlx5_0" is UCX's "mlx5_0:1"), and a check that UCX did
// select an RDMA lane; when it did not, Init fails with ErrUnavailable and
// the lanes UCX found.
//
// The test-only option transports.rdma.testing_unsafe_tcp_lanes (refused
// unless KVCONNECT_ALLOW_TESTING_OPTIONS=1 is set too) runs the same data
// path over UCX's tcp lanes, so the conformance suite exercises it on
// hosts without RDMA.
//
// Device state comes from sysfs (<sysfs_root>/class/infiniband/...), under
// a root that tests point at fixture trees in testdata/. libibverbs and UCX
// are loaded with dlopen at run time (cgo, Linux only; other builds report
// them unavailable), so the plugin starts on hosts without them. Probe is
// the same preflight without a transport, for kvconnect doctor.
package rdma

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"

	"go.uber.org/zap"

	ucxlib "github.com/kvconnect/kvconnect/internal/ucx"
	"github.com/kvconnect/kvconnect/plugins"
	"github.com/kvconnect/kvconnect/transports/internal/ucxpath"
	"github.com/kvconnect/kvconnect/transports/names"
)

// Name is the transport's name in configs and descriptors.
const Name = names.RDMA

// Version is the transport implementation's version.
const Version = "0.2.0"

var _ plugins.Transport = (*Transport)(nil)

// Transport is the rdma transport. Create it with New.
type Transport struct {
	guard   plugins.Guard
	mu      sync.Mutex
	dp      *ucxpath.Transport // the data path, once Init succeeded
	testing bool               // up over the test-only tcp lanes
	// loader, memlock and lookupEnv replace the real library loader,
	// memlock reader and environment in tests (nil = the real ones).
	loader    Loader
	memlock   func() Memlock
	lookupEnv func(string) (string, bool)
}

// New returns an rdma transport. It does nothing until Init.
func New() *Transport { return &Transport{} }

// Info describes the transport.
func (t *Transport) Info(ctx context.Context) (plugins.Info, error) {
	info := plugins.Info{
		Name:         Name,
		Version:      Version,
		APIVersion:   plugins.APIVersion,
		Capabilities: plugins.CapRead | plugins.CapWrite | plugins.CapAbsoluteAddress,
	}
	t.mu.Lock()
	dp := t.dp
	t.mu.Unlock()
	if dp != nil {
		di, err := dp.Info(ctx)
		if err != nil {
			return plugins.Info{}, err
		}
		info.Capabilities = di.Capabilities
	}
	return info, nil
}

// setup is what Init derives from the request before it touches the host.
type setup struct {
	opts       Options
	testing    bool
	devices    []string // the devices the preflight checks ("" = every one)
	tls        string
	netDevices string
	ucx        []byte // the UCX variant's options JSON
}

// configure decodes and checks the options and device_name; every error
// wraps ErrInvalidArgument.
func (t *Transport) configure(req plugins.InitRequest) (setup, error) {
	s := setup{opts: DefaultOptions()}
	o := &s.opts
	if err := plugins.DecodeOptions(Name, req.Options, o); err != nil {
		return s, err
	}
	if err := o.validate(); err != nil {
		return s, err
	}
	lookup := t.lookupEnv
	if lookup == nil {
		lookup = lookupEnv
	}
	var err error
	if s.testing, err = o.checkTesting(lookup); err != nil {
		return s, err
	}
	if s.tls, err = o.lanes(s.testing); err != nil {
		return s, err
	}
	var nets string
	if s.devices, nets, err = devicePorts(req.DeviceName, o.IBPort); err != nil {
		return s, err
	}
	switch {
	case o.NetDevices != "":
		s.netDevices = strings.TrimSpace(o.NetDevices)
	case !s.testing:
		s.netDevices = nets
	}
	// With the test-only lanes, device_name names RDMA devices that UCX's
	// tcp lanes do not use: every network device (or net_devices) it is.
	if s.ucx, err = json.Marshal(o.ucxOptions(s.tls, s.netDevices, s.testing)); err != nil {
		return s, fmt.Errorf("rdma: encoding the UCX options: %w: %w", plugins.ErrInternal, err)
	}
	return s, checkUCXOptions(s.ucx)
}

// checkUCXOptions runs the ucx transport's own option checks (names,
// ranges, ucx_config) on the rdma transport's UCX options, before the
// preflight, so a typo is reported on any host. The ucx transport checks
// its options before anything else in Init, and a closed one then refuses
// to start: an Init on a closed variant checks them and touches nothing.
func checkUCXOptions(raw []byte) error {
	v := ucxpath.New(ucxpath.Variant{Name: Name})
	v.Close(context.Background())
	_, err := v.Init(context.Background(), plugins.InitRequest{Options: raw})
	if errors.Is(err, plugins.ErrClosed) {
		return nil
	}
	var ie *plugins.InitError
	if errors.As(err, &ie) && ie.Err != nil {
		return ie.Err
	}
	return err
}

// Init decodes the options (transports.rdma), runs the preflight and, when
// it passes, brings up the UCX data path on RDMA lanes. It fails with the
// first failing check's diagnosis, or, when the preflight passes but UCX
// selects no RDMA lane, with a StepProbeDevices diagnosis listing the lanes
// UCX found; both wrap ErrUnavailable. Bad options wrap
// ErrInvalidArgument. With the test-only option (and its environment
// variable) the preflight's verdict is logged and ignored and the data
// path runs over UCX's tcp lanes.
func (t *Transport) Init(ctx context.Context, req plugins.InitRequest) (plugins.InitResult, error) {
	if err := t.guard.BeginInit(Name); err != nil {
		return plugins.InitResult{}, err
	}
	log := req.Logger
	if log == nil {
		log = zap.NewNop()
	}
	dp, res, testing, err := t.start(ctx, req, log)
	if err != nil {
		t.guard.EndInit(Name, false)
		return plugins.InitResult{}, err
	}
	t.mu.Lock()
	if err := t.guard.EndInit(Name, true); err != nil {
		t.mu.Unlock()
		dp.Close(context.Background()) // Close came while Init ran
		return plugins.InitResult{}, err
	}
	t.dp, t.testing = dp, testing
	t.mu.Unlock()
	if testing {
		log.Warn("TESTING ONLY, NOT RDMA: rdma transport up over UCX's tcp lanes", zap.String("summary", res.Summary))
	}
	return res, nil
}

// start is Init's work: the options, the preflight and the data path. It
// returns the data path, up, and whether it runs over the test-only tcp
// lanes.
func (t *Transport) start(ctx context.Context, req plugins.InitRequest, log *zap.Logger) (*ucxpath.Transport, plugins.InitResult, bool, error) {
	s, err := t.configure(req)
	if err != nil {
		return nil, plugins.InitResult{}, false, configError(err)
	}
	if s.testing {
		log.Warn("TESTING ONLY: transports.rdma." + TestingOption + " is set: this rdma transport will run over UCX's tcp lanes, not RDMA; the RDMA preflight's verdict is ignored")
	}
	r := Probe(ctx, ProbeOptions{DeviceName: strings.Join(s.devices, ","), Options: s.opts, Loader: t.loader, Memlock: t.memlock})
	for _, d := range r.Devices {
		log.Debug("rdma device", zap.String("device", d.Name), zap.String("summary", d.summary()))
	}
	for _, n := range r.Notes {
		log.Info("rdma preflight", zap.String("note", n))
	}
	if r.Diagnosis != nil {
		if !s.testing || !errors.Is(r.Diagnosis, plugins.ErrUnavailable) {
			return nil, plugins.InitResult{}, false, r.Diagnosis
		}
		log.Warn("TESTING ONLY: RDMA preflight failed; ignored because transports.rdma."+TestingOption+" is set",
			zap.String("check", string(r.Check)), zap.Error(r.Diagnosis))
	}
	v := ucxpath.Variant{Name: Name, Version: Version, DefaultTLS: ucxpath.RDMALanes, Require: ucxpath.RequireRDMA}
	if s.testing {
		v = ucxpath.Variant{Name: Name, Version: Version, DefaultTLS: "tcp"}
	}
	dp := ucxpath.New(v)
	res, err := dp.Init(ctx, plugins.InitRequest{Hostname: req.Hostname, Metadata: req.Metadata, Protocol: req.Protocol,
		Options: s.ucx, Logger: log})
	if err != nil {
		dp.Close(context.Background())
		return nil, plugins.InitResult{}, false, dataPathError(err, &r, s)
	}
	if s.testing {
		verdict := "passed"
		if r.Diagnosis != nil {
			verdict = "failed (ignored): " + r.Diagnosis.Error()
		}
		res.Summary = fmt.Sprintf("TESTING ONLY, NOT RDMA: the rdma transport runs over UCX's tcp lanes (transports.rdma.%s): %s; RDMA preflight %s",
			TestingOption, res.Summary, verdict)
		return dp, res, true, nil
	}
	res.Summary += "; RDMA devices: " + usableDevices(&r)
	return dp, res, false, nil
}

// usableDevices describes the devices the preflight passed.
func usableDevices(r *Report) string {
	var devs []string
	for _, n := range r.Usable {
		d := r.Device(n)
		devs = append(devs, fmt.Sprintf("%s (port %d %s, %s, GID index %d %s)",
			d.Name, d.Port, d.port(d.Port).State.Name, d.port(d.Port).LinkLayer, d.GIDIndex, d.GID.Addr))
	}
	return strings.Join(devs, ", ")
}

// dataPathError explains a failure to bring up the UCX data path after the
// preflight passed. UCX finding no RDMA transport (UCS_ERR_NO_DEVICE for
// RDMA-only lanes, or the RDMA-lane check) becomes the "no RDMA lane"
// diagnosis; anything else is the ucx transport's own.
func dataPathError(err error, r *Report, s setup) error {
	var ie *plugins.InitError
	if s.testing || !errors.As(err, &ie) || ie.Step != plugins.StepProbeDevices || !errors.Is(err, plugins.ErrUnavailable) {
		return err
	}
	nets := s.netDevices
	if nets == "" {
		nets = "any device (device_name and net_devices are empty)"
	}
	return &plugins.InitError{
		Transport:  Name,
		Step:       plugins.StepProbeDevices,
		NativeCode: ie.NativeCode,
		NativeName: ie.NativeName,
		Cause: fmt.Sprintf("the RDMA preflight passed (%s) but UCX selected no RDMA lane: %s",
			usableDevices(r), ie.Cause),
		Hints: []string{
			fmt.Sprintf("`ucx_info -d` (Debian package ucx-utils) lists the transports and devices UCX finds: the rdma transport needs rc_verbs, ud_verbs, rc_mlx5, ud_mlx5 or dc_mlx5 on %s; "+
				"if it lists none, this UCX was built without verbs/mlx5 support (no ucx/libuct_ib.so, or configured without --with-verbs / --with-mlx5-dv): "+
				"install a UCX built with rdma-core (Debian libucx0, or the UCX of MLNX_OFED / DOCA-OFED)", nets),
			"UCX opens the devices through libibverbs and the NIC's verbs provider: " + hintProviders + "; `ibv_devinfo` must list the device",
			fmt.Sprintf("UCX names RDMA devices <device>:<port>, here %s (from device_name and transports.rdma.ib_port, MC_IB_PORT, or transports.rdma.net_devices): "+
				"they must match the devices `ucx_info -d` lists", nets),
			fmt.Sprintf("transports.rdma.tls is %q (default %s; add dc for DC on mlx5): it replaces UCX_TLS for this transport, but other UCX_* variables in the environment (UCX_IB_*, UCX_RC_*, UCX_NET_DEVICES when net_devices is empty) still apply and can hide lanes", s.tls, ucxpath.RDMALanes),
			hintFallback,
		},
		Err: ie.Err,
	}
}

// dataPath returns the UCX data path, or why there is none.
func (t *Transport) dataPath() (*ucxpath.Transport, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := t.guard.Up(Name); err != nil {
		return nil, err
	}
	return t.dp, nil
}

// Resources are the UCX transports and devices the data path uses (nil
// before Init).
func (t *Transport) Resources() []ucxlib.Resource {
	dp, err := t.dataPath()
	if err != nil {
		return nil
	}
	return dp.Resources()
}

// Lanes are the lanes UCX selected for a connected peer.
func (t *Transport) Lanes(id plugins.PeerID) ([]ucxlib.Lane, error) {
	dp, err := t.dataPath()
	if err != nil {
		return nil, err
	}
	return dp.Lanes(id)
}

// RegisterRegion registers r's memory with UCX (and so with the RDMA
// device) and returns its key for peers.
func (t *Transport) RegisterRegion(ctx context.Context, r plugins.Region) ([]byte, error) {
	dp, err := t.dataPath()
	if err != nil {
		return nil, err
	}
	return dp.RegisterRegion(ctx, r)
}

// DeregisterRegion revokes the region at the peers and deregisters it.
func (t *Transport) DeregisterRegion(ctx context.Context, id plugins.RegionID) error {
	dp, err := t.dataPath()
	if err != nil {
		return err
	}
	return dp.DeregisterRegion(ctx, id)
}

// Connect opens a peer.
func (t *Transport) Connect(ctx context.Context, peer plugins.PeerInfo) (plugins.PeerID, error) {
	dp, err := t.dataPath()
	if err != nil {
		return 0, err
	}
	return dp.Connect(ctx, peer)
}

// Disconnect closes a peer.
func (t *Transport) Disconnect(ctx context.Context, id plugins.PeerID) error {
	dp, err := t.dataPath()
	if err != nil {
		return err
	}
	return dp.Disconnect(ctx, id)
}

// Transfer runs a batch of ops against a peer.
func (t *Transport) Transfer(ctx context.Context, peer plugins.PeerID, ops []plugins.Op, results []plugins.OpResult) error {
	dp, err := t.dataPath()
	if err != nil {
		plugins.FillResults(results, err)
		return err
	}
	return dp.Transfer(ctx, peer, ops, results)
}

// Close closes the data path, if any. It is idempotent.
func (t *Transport) Close(ctx context.Context) error {
	t.mu.Lock()
	if first, _ := t.guard.BeginClose(); !first {
		t.mu.Unlock()
		return nil
	}
	dp := t.dp
	t.mu.Unlock()
	if dp != nil {
		return dp.Close(ctx)
	}
	return nil
}
