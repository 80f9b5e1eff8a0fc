package ascend

import (
	"context"
	"errors"
	"regexp"
	"strings"
	"testing"

	"github.com/kvconnect/kvconnect/plugins"
)

// newForTest returns a transport whose probe reads env instead of the
// process environment. In a build without cgo, a stand-in loader accepts
// any libascendcl.so found, so the steps after loading are still covered.
func newForTest(getenv func(string) string) *Transport {
	t := New()
	t.probe.Getenv = getenv
	if !cgoLoader {
		t.probe.load = func(path, symbol string) (string, error) { return path, nil }
	}
	return t
}

func TestInit(t *testing.T) {
	home := goodToolkit(t)
	npu3 := fixtureDev(t, "npu3-container")
	noDriver := fixtureDev(t, "no-driver")
	twoNPUs := fixtureDev(t, "two-npus")
	opts := func(kv ...string) []byte { // JSON object from key, raw-JSON-value pairs
		parts := []string{}
		for i := 0; i+1 < len(kv); i += 2 {
			parts = append(parts, `"`+kv[i]+`":`+kv[i+1])
		}
		return []byte("{" + strings.Join(parts, ",") + "}")
	}
	q := func(s string) string { return `"` + s + `"` }
	tests := []struct {
		name     string
		hostname string
		options  []byte
		env      []string

		wantStep  string
		wantErr   error  // the sentinel the error wraps
		wantCause string // exact cause, or a regexp when it starts with ^
		wantIn    []string
	}{
		{
			name: "probe passes: the data path is missing", hostname: "127.0.0.1",
			options: opts("dev_root", q(npu3), "ascend_home", q(home), "port", "15432"), env: []string{EnvNPUPhyID, "3"},
			wantStep: plugins.StepDataPath, wantErr: plugins.ErrUnavailable,
			wantCause: "Ascend data path requires the CANN runtime; not available on this host (would publish segment 127.0.0.1:15432:npu_3; NPU id 3 from ASCEND_NPU_PHY_ID)",
		},
		{
			name: "free port picked", hostname: "",
			options: opts("dev_root", q(npu3), "ascend_home", q(home)), env: []string{EnvNPUPhyID, "3"},
			wantStep: plugins.StepDataPath, wantErr: plugins.ErrUnavailable,
			wantCause: `^Ascend data path requires the CANN runtime; not available on this host \(would publish segment 127\.0\.0\.1:[1-9][0-9]*:npu_3; NPU id 3 from ASCEND_NPU_PHY_ID\)$`,
		},
		{
			name: "hostname host:port keeps the host", hostname: "prefill-0.cluster:8998",
			options:  opts("dev_root", q(npu3), "ascend_home", q(home), "port", "15432", "npu_id", "3"),
			wantStep: plugins.StepDataPath, wantErr: plugins.ErrUnavailable,
			wantCause: DataPathUnavailable + " (would publish segment prefill-0.cluster:15432:npu_3; NPU id 3 from transports.ascend.npu_id)",
		},
		{
			name: "segment name as hostname", hostname: "10.0.0.1:15000:npu_3",
			options:  opts("dev_root", q(npu3), "ascend_home", q(home)),
			wantStep: plugins.StepDataPath, wantErr: plugins.ErrUnavailable,
			wantCause: DataPathUnavailable + ` (would publish segment 10.0.0.1:15000:npu_3; NPU id 3 from hostname "10.0.0.1:15000:npu_3")`,
		},
		{
			name: "IPv6 segment name agreeing with the options", hostname: "[fd00::1]:15000:npu_3",
			options:  opts("dev_root", q(npu3), "ascend_home", q(home), "npu_id", "3", "port", "15000"),
			wantStep: plugins.StepDataPath, wantErr: plugins.ErrUnavailable,
			wantCause: DataPathUnavailable + " (would publish segment [fd00::1]:15000:npu_3; NPU id 3 from transports.ascend.npu_id)",
		},
		{
			name: "bare IPv6 hostname", hostname: "fd00::1",
			options:  opts("dev_root", q(npu3), "ascend_home", q(home), "npu_id", "3", "port", "15000"),
			wantStep: plugins.StepDataPath, wantErr: plugins.ErrUnavailable,
			wantCause: DataPathUnavailable + " (would publish segment [fd00::1]:15000:npu_3; NPU id 3 from transports.ascend.npu_id)",
		},
		{
			name: "npu_id filled from ASCEND_NPU_PHY_ID by the config layer", hostname: "127.0.0.1",
			options: opts("dev_root", q(npu3), "ascend_home", q(home), "port", "15432", "npu_id", "3"), env: []string{EnvNPUPhyID, "3"},
			wantStep: plugins.StepDataPath, wantErr: plugins.ErrUnavailable,
			wantCause: DataPathUnavailable + " (would publish segment 127.0.0.1:15432:npu_3; NPU id 3 from transports.ascend.npu_id (ASCEND_NPU_PHY_ID=3))",
		},
		{
			name: "driver missing, NPU id and segment still shown", hostname: "127.0.0.1",
			options: opts("dev_root", q(noDriver), "ascend_home", q(home), "port", "15432"), env: []string{EnvNPUPhyID, "3"},
			wantStep: plugins.StepProbeDevices, wantErr: plugins.ErrUnavailable,
			wantCause: "no " + noDriver + "/davinci_manager: the Ascend NPU driver is not installed on this host, or its devices are not passed into this container (would publish segment 127.0.0.1:15432:npu_3; NPU id 3 from ASCEND_NPU_PHY_ID)",
		},
		{
			name: "NPU id not on this host", hostname: "127.0.0.1",
			options:  opts("dev_root", q(twoNPUs), "ascend_home", q(home), "port", "15432", "npu_id", "5"),
			wantStep: plugins.StepOpenDevice, wantErr: plugins.ErrUnavailable,
			wantCause: "no " + twoNPUs + "/davinci5 for NPU id 5 (from transports.ascend.npu_id): this host has " + twoNPUs + "/davinci0, " + twoNPUs + "/davinci1 (would publish segment 127.0.0.1:15432:npu_5; NPU id 5 from transports.ascend.npu_id)",
		},
		{
			name: "NPU id not set: no segment name", hostname: "127.0.0.1",
			options:  opts("dev_root", q(twoNPUs), "ascend_home", q(home)),
			wantStep: plugins.StepConfigure, wantErr: plugins.ErrUnavailable,
			wantCause: "NPU id not set: transports.ascend.npu_id is -1 and no local_device_index is configured, and ASCEND_NPU_PHY_ID is not set",
		},
		{
			name: "ASCEND_NPU_PHY_ID not an integer", hostname: "127.0.0.1",
			options: opts("dev_root", q(twoNPUs), "ascend_home", q(home)), env: []string{EnvNPUPhyID, "three"},
			wantStep: plugins.StepConfigure, wantErr: plugins.ErrUnavailable,
			wantCause: `ASCEND_NPU_PHY_ID="three" is not an integer: want the physical NPU id (0, 1, ...) or -1 for unset`,
		},
		{
			name: "unknown option", options: opts("npu", "3"),
			wantStep: plugins.StepConfigure, wantErr: plugins.ErrInvalidArgument,
			wantIn: []string{"unknown option transports.ascend.npu", `did you mean "npu_id"?`},
		},
		{
			name: "npu_id of the wrong type", options: opts("npu_id", `"3"`),
			wantStep: plugins.StepConfigure, wantErr: plugins.ErrInvalidArgument,
			wantIn: []string{`option transports.ascend.npu_id = "3": want int`},
		},
		{
			name: "npu_id below -1", options: opts("npu_id", "-2"),
			wantStep: plugins.StepConfigure, wantErr: plugins.ErrInvalidArgument,
			wantIn: []string{"option transports.ascend.npu_id = -2: must be an NPU id 0-2147483647, or -1 for not set"},
		},
		{
			name: "port out of range", options: opts("port", "70000"),
			wantStep: plugins.StepConfigure, wantErr: plugins.ErrInvalidArgument,
			wantIn: []string{"option transports.ascend.port = 70000: must be between 0 and 65535"},
		},
		{
			name: "relative dev_root", options: opts("dev_root", `"dev"`),
			wantStep: plugins.StepConfigure, wantErr: plugins.ErrInvalidArgument,
			wantIn: []string{`option transports.ascend.dev_root = "dev": must be an absolute directory`},
		},
		{
			name: "relative ascend_home", options: opts("ascend_home", `"Ascend"`),
			wantStep: plugins.StepConfigure, wantErr: plugins.ErrInvalidArgument,
			wantIn: []string{`option transports.ascend.ascend_home = "Ascend": must be an absolute directory`},
		},
		{
			name: "malformed segment name", hostname: "10.0.0.1:15000:npu3",
			wantStep: plugins.StepConfigure, wantErr: plugins.ErrInvalidArgument,
			wantIn: []string{`hostname: ascend: segment name "10.0.0.1:15000:npu3": last part "npu3" must be npu_N; expected host:port:npu_N, e.g. 10.0.0.1:15000:npu_3`},
		},
		{
			name: "bad host", hostname: "my host",
			wantStep: plugins.StepConfigure, wantErr: plugins.ErrInvalidArgument,
			wantIn: []string{`hostname "my host": host "my host" contains ' '`, "host:port:npu_N"},
		},
		{
			name: "hostname NPU disagrees with npu_id", hostname: "10.0.0.1:15000:npu_3", options: opts("npu_id", "2"),
			wantStep: plugins.StepConfigure, wantErr: plugins.ErrInvalidArgument,
			wantIn: []string{`hostname "10.0.0.1:15000:npu_3" names npu_3 but transports.ascend.npu_id is 2`},
		},
		{
			name: "hostname port disagrees with port", hostname: "10.0.0.1:15000:npu_3", options: opts("port", "15001"),
			wantStep: plugins.StepConfigure, wantErr: plugins.ErrInvalidArgument,
			wantIn: []string{`hostname "10.0.0.1:15000:npu_3" has port 15000 but transports.ascend.port is 15001`},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr := newForTest(env(tt.env...))
			defer tr.Close(context.Background())
			res, err := tr.Init(context.Background(), plugins.InitRequest{Hostname: tt.hostname, Protocol: Name, Options: tt.options})
			if err == nil {
				t.Fatalf("Init succeeded: %+v", res)
			}
			var ie *plugins.InitError
			if !errors.As(err, &ie) {
				t.Fatalf("Init error is not an *InitError: %v", err)
			}
			if ie.Transport != Name || ie.Step != tt.wantStep {
				t.Errorf("diagnosis %s/%s; want %s/%s: %v", ie.Transport, ie.Step, Name, tt.wantStep, err)
			}
			if !errors.Is(err, tt.wantErr) {
				t.Errorf("error does not wrap %v: %v", tt.wantErr, err)
			}
			if tt.wantErr == plugins.ErrInvalidArgument && errors.Is(err, plugins.ErrUnavailable) {
				t.Errorf("configuration error wraps ErrUnavailable (it must not drive fallback): %v", err)
			}
			switch {
			case strings.HasPrefix(tt.wantCause, "^"):
				if !regexp.MustCompile(tt.wantCause).MatchString(ie.Cause) {
					t.Errorf("cause %q does not match %s", ie.Cause, tt.wantCause)
				}
			case tt.wantCause != "":
				if ie.Cause != tt.wantCause {
					t.Errorf("cause\n got %q\nwant %q", ie.Cause, tt.wantCause)
				}
			}
			containsAll(t, "error", err.Error(), tt.wantIn...)
			if tt.wantStep == plugins.StepDataPath {
				if !strings.HasPrefix(ie.Cause, DataPathUnavailable) {
					t.Errorf("cause %q does not start with %q", ie.Cause, DataPathUnavailable)
				}
				containsAll(t, "hints", strings.Join(ie.Hints, "\n"), "no Ascend NPU data path", "nothing here has been run on Ascend hardware",
					"the probe passed: "+npu3+"/davinci_manager", home+"/lib64/libascendcl.so (exports aclInit)", "fallback chain moves on", "docs/ASCEND.md")
			}
		})
	}
}

func TestInitCanceled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := newForTest(env()).Init(ctx, plugins.InitRequest{})
	var ie *plugins.InitError
	if !errors.As(err, &ie) || !errors.Is(err, plugins.ErrCanceled) || !errors.Is(err, context.Canceled) {
		t.Fatalf("Init with a canceled context: %v; want an *InitError wrapping ErrCanceled", err)
	}
}

func TestLifecycle(t *testing.T) {
	ctx := context.Background()
	tr := newForTest(env())
	info, err := tr.Info(ctx)
	if err != nil || info.Name != "ascend" || info.APIVersion != plugins.APIVersion || info.Capabilities != 0 {
		t.Fatalf("Info = %+v, %v", info, err)
	}
	if _, err := tr.RegisterRegion(ctx, plugins.Region{ID: 1}); !errors.Is(err, plugins.ErrNotInitialized) {
		t.Errorf("RegisterRegion: %v; want ErrNotInitialized", err)
	}
	if err := tr.DeregisterRegion(ctx, 1); !errors.Is(err, plugins.ErrNotInitialized) {
		t.Errorf("DeregisterRegion: %v; want ErrNotInitialized", err)
	}
	if _, err := tr.Connect(ctx, plugins.PeerInfo{Name: "10.0.0.1:15000"}); !errors.Is(err, plugins.ErrNotInitialized) {
		t.Errorf("Connect: %v; want ErrNotInitialized", err)
	}
	if err := tr.Disconnect(ctx, 1); !errors.Is(err, plugins.ErrNotInitialized) {
		t.Errorf("Disconnect: %v; want ErrNotInitialized", err)
	}
	results := make([]plugins.OpResult, 3)
	if err := tr.Transfer(ctx, 1, make([]plugins.Op, 3), results); !errors.Is(err, plugins.ErrNotInitialized) {
		t.Errorf("Transfer: %v; want ErrNotInitialized", err)
	}
	for i, r := range results {
		if !errors.Is(r.Err, plugins.ErrNotInitialized) {
			t.Errorf("result %d: %v; want ErrNotInitialized", i, r.Err)
		}
	}
	for i := 0; i < 2; i++ {
		if err := tr.Close(ctx); err != nil {
			t.Fatalf("Close #%d: %v", i+1, err)
		}
	}
	if _, err := tr.Init(ctx, plugins.InitRequest{}); !errors.Is(err, plugins.ErrClosed) {
		t.Errorf("Init after Close: %v; want ErrClosed", err)
	}
}
