// Package ascend is kvconnect's transport for Huawei Ascend NPUs, as
// SGLang selects it with ENABLE_ASCEND_TRANSFER_WITH_MOONCAKE.
//
// What exists: a probe of the host the way an Ascend operator debugs it
// (the driver's device nodes /dev/davinci_manager, /dev/davinci<N>,
// /dev/devmm_svm and /dev/hisi_hdc; the NPU id from the configuration or
// ASCEND_NPU_PHY_ID; the CANN runtime library libascendcl.so, searched in
// ASCEND_HOME_PATH and LD_LIBRARY_PATH and loaded with dlopen), one
// diagnosis with hints for each missing piece, and the segment names
// SGLang and Mooncake use for Ascend nodes (host:port:npu_N).
//
// What does not exist: an NPU data path. Moving KV blocks between NPUs
// needs the CANN runtime, which this transport does not call and which no
// build or test machine of this project has. Init therefore always fails
// with an *plugins.InitError wrapping plugins.ErrUnavailable, so the
// connector's fallback chain moves on: the first missing piece when the
// probe finds one, else StepDataPath with DataPathUnavailable and the
// segment name the node would have published. Nothing here has been run on
// Ascend hardware. See docs/ASCEND.md.
//
// Loading libascendcl needs cgo (linux && cgo); other builds report
// "cannot load libascendcl without cgo".
package ascend

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"

	"go.uber.org/zap"

	"github.com/kvconnect/kvconnect/plugins"
	"github.com/kvconnect/kvconnect/transports/names"
)

// Name is the transport's name in configs and descriptors.
const Name = names.Ascend

// Version is the transport implementation's version.
const Version = "0.1.0"

// DefaultHost is the host of the segment name when the hostname is empty.
const DefaultHost = "127.0.0.1"

var _ plugins.Transport = (*Transport)(nil)

// Transport is the Ascend transport. Init never succeeds (there is no NPU
// data path); it says why. The zero value is not usable; call New.
type Transport struct {
	guard plugins.Guard

	// probe replaces Probe's hooks in tests.
	probe ProbeOptions
}

// New returns an Ascend transport. It does nothing until Init.
func New() *Transport {
	return &Transport{}
}

// Info describes the transport. It reports no capabilities: it moves no
// bytes.
func (t *Transport) Info(ctx context.Context) (plugins.Info, error) {
	return plugins.Info{Name: Name, Version: Version, APIVersion: plugins.APIVersion}, nil
}

// Init reads the options, works out the NPU id and segment name, probes
// the host and returns why the transport cannot run here: always an
// *plugins.InitError. Host problems (a missing driver, device node, NPU id
// or library, and finally the missing data path) wrap
// plugins.ErrUnavailable so the fallback chain moves on; malformed options
// and hostnames wrap plugins.ErrInvalidArgument, as in every transport.
func (t *Transport) Init(ctx context.Context, req plugins.InitRequest) (plugins.InitResult, error) {
	if err := t.guard.BeginInit(Name); err != nil {
		return plugins.InitResult{}, err
	}
	defer t.guard.EndInit(Name, false) // Init never succeeds: the transport stays new
	po := t.probe
	log := req.Logger
	if log == nil {
		log = zap.NewNop()
	}
	fail := func(ie *plugins.InitError) (plugins.InitResult, error) {
		log.Debug("ascend transport unavailable", zap.String("step", ie.Step), zap.String("cause", ie.Cause), zap.Strings("hints", ie.Hints))
		return plugins.InitResult{}, ie
	}
	if err := ctx.Err(); err != nil {
		return fail(configError(plugins.StepConfigure, "Init canceled: "+err.Error(), plugins.ContextError(err)))
	}

	opts := DefaultOptions()
	if err := plugins.DecodeOptions(Name, req.Options, &opts); err != nil {
		return fail(configError(plugins.StepConfigure, err.Error(), err))
	}
	if err := opts.validate(); err != nil {
		return fail(configError(plugins.StepConfigure, err.Error(), err))
	}
	seg, err := segmentFromHostname(req.Hostname, opts)
	if err != nil {
		return fail(configError(plugins.StepConfigure, err.Error(), err))
	}

	po.DevRoot, po.AscendHome = opts.DevRoot, opts.AscendHome
	po.NPUID, po.NPUIDSource = opts.NPUID, "transports.ascend.npu_id"
	getenv := po.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	if v := strings.TrimSpace(getenv(EnvNPUPhyID)); opts.NPUID >= 0 && v == strconv.Itoa(opts.NPUID) {
		// The config layer fills npu_id from ASCEND_NPU_PHY_ID; name it.
		po.NPUIDSource += " (" + EnvNPUPhyID + "=" + v + ")"
	}
	if opts.NPUID == NoNPUID && seg.npu >= 0 {
		po.NPUID, po.NPUIDSource = seg.npu, fmt.Sprintf("hostname %q", req.Hostname)
	}
	rep := Probe(ctx, po)
	for _, c := range rep.Checks {
		log.Debug("ascend probe", zap.String("check", c.Name), zap.String("status", string(c.Status)), zap.String("detail", c.Detail))
	}
	if err := ctx.Err(); err != nil {
		return fail(configError(plugins.StepProbeDevices, "Init canceled during the probe: "+err.Error(), plugins.ContextError(err)))
	}

	// The segment name this node would publish, shown in every diagnosis
	// that knows the NPU id.
	where := ""
	if rep.NPUID >= 0 {
		port, perr := seg.port, error(nil)
		if port == 0 {
			port, perr = freePort()
		}
		switch {
		case perr == nil:
			where = fmt.Sprintf(" (would publish segment %s; NPU id %d from %s)",
				FormatSegmentName(seg.host, port, rep.NPUID), rep.NPUID, rep.NPUIDSource)
		case rep.Problem() == nil:
			return fail(&plugins.InitError{Transport: Name, Step: plugins.StepBind,
				Cause: "cannot pick a free port for the segment name: " + perr.Error(),
				Hints: []string{"set transports.ascend.port to a free port"},
				Err:   fmt.Errorf("%w: %w", plugins.ErrUnavailable, perr)})
		}
	}
	if p := rep.Problem(); p != nil {
		ie := *p
		ie.Cause += where
		return fail(&ie)
	}
	hints := []string{
		"kvconnect has no Ascend NPU data path: it does not call the CANN runtime (ACL/HCCL) to move KV blocks, and nothing here has been run on Ascend hardware",
		fmt.Sprintf("the probe passed: %s, %s, %s, %s and %s (exports %s)",
			rep.DevRoot+"/davinci_manager", fmt.Sprintf("%s/davinci%d", rep.DevRoot, rep.NPUID), rep.DevRoot+"/devmm_svm", rep.DevRoot+"/hisi_hdc", rep.Library, Symbol),
		"the fallback chain moves on to the next configured transport (tcp ends every chain), which moves KV blocks through host memory",
		"see docs/ASCEND.md",
	}
	return fail(&plugins.InitError{Transport: Name, Step: plugins.StepDataPath,
		Cause: DataPathUnavailable + where, Hints: hints, Err: plugins.ErrUnavailable})
}

func configError(step, cause string, err error) *plugins.InitError {
	return &plugins.InitError{Transport: Name, Step: step, Cause: cause, Err: err}
}

// segment is what the hostname says about the segment name.
type segment struct {
	host string
	port int // 0: pick a free one
	npu  int // -1: not in the hostname
}

// segmentFromHostname takes the host, and the port and NPU id when the
// hostname is a full segment name host:port:npu_N, checking them against
// the options. A hostname host:port keeps only host (the port of a
// segment name is its own, transports.ascend.port).
func segmentFromHostname(hostname string, o Options) (segment, error) {
	s := segment{host: hostname, port: o.Port, npu: NoNPUID}
	switch {
	case hostname == "":
		s.host = DefaultHost
	case !strings.Contains(hostname, ":"):
	case isIP(hostname):
	case isHostPort(hostname):
		s.host, _, _ = net.SplitHostPort(hostname)
	default:
		h, port, npu, err := ParseSegmentName(hostname)
		if err != nil {
			return s, fmt.Errorf("hostname: %w", err)
		}
		if o.Port != 0 && o.Port != port {
			return s, fmt.Errorf("ascend: hostname %q has port %d but transports.ascend.port is %d: set one of them, or both alike: %w",
				hostname, port, o.Port, plugins.ErrInvalidArgument)
		}
		if o.NPUID != NoNPUID && o.NPUID != npu {
			return s, fmt.Errorf("ascend: hostname %q names npu_%d but transports.ascend.npu_id is %d (from ASCEND_NPU_PHY_ID or local_device_index): make them agree: %w",
				hostname, npu, o.NPUID, plugins.ErrInvalidArgument)
		}
		s.host, s.port, s.npu = h, port, npu
		return s, nil
	}
	if strings.Contains(s.host, ":") {
		if err := validIPv6(s.host); err != nil {
			return s, fmt.Errorf("ascend: hostname %q: host %q %v: %w", hostname, s.host, err, plugins.ErrInvalidArgument)
		}
	} else if err := ValidHost(s.host); err != nil {
		return s, fmt.Errorf("ascend: hostname %q: host %q %v: want a host name or IP address, or %s: %w", hostname, s.host, err, SegmentNameForm, plugins.ErrInvalidArgument)
	}
	return s, nil
}

func isIP(s string) bool {
	_, err := netip.ParseAddr(s)
	return err == nil
}

// isHostPort reports whether s is host:port or [ipv6]:port.
func isHostPort(s string) bool {
	_, p, err := net.SplitHostPort(s)
	if err != nil {
		return false
	}
	_, err = parseDecimal(p, 65535)
	return err == nil
}

// freePort picks a free TCP port, as SGLang does for the segment name.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", ":0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// notInitialized is what every call answers: ErrClosed after Close, as
// the other transports do, else ErrNotInitialized.
func (t *Transport) notInitialized(op string) error {
	if t.guard.Closed() {
		return fmt.Errorf("ascend: %s: %w", op, plugins.ErrClosed)
	}
	return fmt.Errorf("ascend: %s: the transport is not initialized (it has no NPU data path; Init always fails): %w", op, plugins.ErrNotInitialized)
}

// RegisterRegion fails: the transport never initialises.
func (t *Transport) RegisterRegion(ctx context.Context, r plugins.Region) ([]byte, error) {
	return nil, t.notInitialized("RegisterRegion")
}

// DeregisterRegion fails: the transport never initialises.
func (t *Transport) DeregisterRegion(ctx context.Context, id plugins.RegionID) error {
	return t.notInitialized("DeregisterRegion")
}

// Connect fails: the transport never initialises.
func (t *Transport) Connect(ctx context.Context, peer plugins.PeerInfo) (plugins.PeerID, error) {
	return 0, t.notInitialized("Connect")
}

// Disconnect fails: the transport never initialises.
func (t *Transport) Disconnect(ctx context.Context, id plugins.PeerID) error {
	return t.notInitialized("Disconnect")
}

// Transfer fails every op: the transport never initialises.
func (t *Transport) Transfer(ctx context.Context, peer plugins.PeerID, ops []plugins.Op, results []plugins.OpResult) error {
	err := t.notInitialized("Transfer")
	plugins.FillResults(results, err)
	return err
}

// Close marks the transport closed; it holds nothing. It is idempotent.
func (t *Transport) Close(ctx context.Context) error {
	t.guard.BeginClose()
	return nil
}
