package ascend

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"

	"github.com/kvconnect/kvconnect/plugins"
)

// noLibrary stands in for dlopen in the device tests: nothing is found.
func noLibrary(path, symbol string) (string, error) {
	return "", &loadError{Call: "dlopen", Msg: path + ": cannot open shared object file: No such file or directory"}
}

func TestProbeDevices(t *testing.T) {
	denied := func(name string) func(string) error {
		return func(p string) error {
			if filepath.Base(p) == name {
				return syscall.EACCES
			}
			return nil
		}
	}
	tests := []struct {
		name     string
		scenario string
		npuID    int
		env      []string
		access   func(string) error

		wantCheck string // the first check that fails; "" = every device check passes
		wantStep  string
		wantCause []string
		wantHints []string
		wantErrno string
		wantNPU   int
		wantSrc   string
		wantNPUs  []int
	}{
		{
			name: "driver not installed", scenario: "no-driver", npuID: 0,
			wantCheck: CheckDriver, wantStep: plugins.StepProbeDevices,
			wantCause: []string{"no $DEV/davinci_manager: the Ascend NPU driver is not installed on this host, or its devices are not passed into this container"},
			wantHints: []string{"npu-smi info", "--device=/dev/davinci_manager --device=/dev/devmm_svm --device=/dev/hisi_hdc --device=/dev/davinci<N>", "fallback chain moves on"},
			wantErrno: "ENOENT", wantNPU: 0, wantSrc: "transports.ascend.npu_id",
		},
		{
			name: "dev root missing", scenario: "does-not-exist", npuID: 0,
			wantCheck: CheckDriver, wantStep: plugins.StepProbeDevices,
			wantCause: []string{"device directory $DEV (transports.ascend.dev_root) does not exist, so there is no $DEV/davinci_manager"},
			wantErrno: "ENOENT", wantNPU: 0, wantSrc: "transports.ascend.npu_id",
		},
		{
			name: "driver without any davinci node", scenario: "driver-only", npuID: 0,
			wantCheck: CheckNPUDevice, wantStep: plugins.StepOpenDevice,
			wantCause: []string{"no $DEV/davinci0 for NPU id 0 (from transports.ascend.npu_id): this host has no $DEV/davinci<N> nodes at all"},
			wantHints: []string{"--device=/dev/davinci0"},
			wantErrno: "ENOENT", wantNPU: 0, wantSrc: "transports.ascend.npu_id",
		},
		{
			name: "no davinci node for the NPU id from the environment", scenario: "no-npu-nodes", npuID: NoNPUID,
			env:       []string{EnvNPUPhyID, "2"},
			wantCheck: CheckNPUDevice, wantStep: plugins.StepOpenDevice,
			wantCause: []string{"no $DEV/davinci2 for NPU id 2 (from ASCEND_NPU_PHY_ID): this host has no $DEV/davinci<N> nodes at all"},
			wantErrno: "ENOENT", wantNPU: 2, wantSrc: EnvNPUPhyID,
		},
		{
			name: "NPU id out of range", scenario: "two-npus", npuID: 5,
			wantCheck: CheckNPUDevice, wantStep: plugins.StepOpenDevice,
			wantCause: []string{"no $DEV/davinci5 for NPU id 5 (from transports.ascend.npu_id): this host has $DEV/davinci0, $DEV/davinci1"},
			wantHints: []string{"use an NPU id this host has: 0, 1 (ASCEND_NPU_PHY_ID is the physical id from `npu-smi info`)", "--device=/dev/davinci5"},
			wantErrno: "ENOENT", wantNPU: 5, wantSrc: "transports.ascend.npu_id", wantNPUs: []int{0, 1},
		},
		{
			name: "NPU id not set", scenario: "two-npus", npuID: NoNPUID,
			wantCheck: CheckNPUID, wantStep: plugins.StepConfigure,
			wantCause: []string{"NPU id not set: transports.ascend.npu_id is -1 and no local_device_index is configured, and ASCEND_NPU_PHY_ID is not set"},
			wantHints: []string{"export ASCEND_NPU_PHY_ID=<id>", "ids present here: 0, 1", "local_device_index", "host:port:npu_N"},
			wantNPU:   NoNPUID, wantNPUs: []int{0, 1},
		},
		{
			name: "ASCEND_NPU_PHY_ID -1 means unset", scenario: "two-npus", npuID: NoNPUID,
			env:       []string{EnvNPUPhyID, "-1"},
			wantCheck: CheckNPUID, wantStep: plugins.StepConfigure,
			wantCause: []string{"NPU id not set", "ASCEND_NPU_PHY_ID is -1 (unset)"},
			wantNPU:   NoNPUID, wantNPUs: []int{0, 1},
		},
		{
			name: "ASCEND_NPU_PHY_ID not an integer", scenario: "two-npus", npuID: NoNPUID,
			env:       []string{EnvNPUPhyID, "npu3"},
			wantCheck: CheckNPUID, wantStep: plugins.StepConfigure,
			wantCause: []string{`ASCEND_NPU_PHY_ID="npu3" is not an integer: want the physical NPU id (0, 1, ...) or -1 for unset`},
			wantHints: []string{"ids present here: 0, 1"},
			wantNPU:   NoNPUID, wantNPUs: []int{0, 1},
		},
		{
			name: "ASCEND_NPU_PHY_ID negative", scenario: "two-npus", npuID: NoNPUID,
			env:       []string{EnvNPUPhyID, "-2"},
			wantCheck: CheckNPUID, wantStep: plugins.StepConfigure,
			wantCause: []string{`ASCEND_NPU_PHY_ID="-2" is out of range`},
			wantNPU:   NoNPUID, wantNPUs: []int{0, 1},
		},
		{
			name: "npu_id option invalid", scenario: "two-npus", npuID: -7,
			wantCheck: CheckNPUID, wantStep: plugins.StepConfigure,
			wantCause: []string{"NPU id -7 from transports.ascend.npu_id is not valid"},
			wantNPU:   NoNPUID, wantNPUs: []int{0, 1},
		},
		{
			name: "ASCEND_NPU_PHY_ID used, spaces trimmed", scenario: "two-npus", npuID: NoNPUID,
			env:     []string{EnvNPUPhyID, " 1\n"},
			wantNPU: 1, wantSrc: EnvNPUPhyID, wantNPUs: []int{0, 1},
		},
		{
			name: "configured npu_id wins over ASCEND_NPU_PHY_ID", scenario: "two-npus", npuID: 0,
			env:     []string{EnvNPUPhyID, "1"},
			wantNPU: 0, wantSrc: "transports.ascend.npu_id", wantNPUs: []int{0, 1},
		},
		{
			name: "container given only davinci3", scenario: "npu3-container", npuID: NoNPUID,
			env:     []string{EnvNPUPhyID, "3"},
			wantNPU: 3, wantSrc: EnvNPUPhyID, wantNPUs: []int{3},
		},
		{
			name: "no devmm_svm", scenario: "no-svm", npuID: 0,
			wantCheck: CheckSVM, wantStep: plugins.StepProbeDevices,
			wantCause: []string{"no $DEV/devmm_svm: the Ascend driver's shared virtual memory device is missing"},
			wantHints: []string{"--device=/dev/devmm_svm"},
			wantErrno: "ENOENT", wantNPU: 0, wantSrc: "transports.ascend.npu_id", wantNPUs: []int{0},
		},
		{
			name: "no hisi_hdc", scenario: "no-hdc", npuID: 0,
			wantCheck: CheckHDC, wantStep: plugins.StepProbeDevices,
			wantCause: []string{"no $DEV/hisi_hdc: the Ascend driver's host-device communication channel is missing"},
			wantHints: []string{"--device=/dev/hisi_hdc"},
			wantErrno: "ENOENT", wantNPU: 0, wantSrc: "transports.ascend.npu_id", wantNPUs: []int{0},
		},
		{
			name: "NPU node not accessible", scenario: "two-npus", npuID: 1, access: denied("davinci1"),
			wantCheck: CheckNPUDevice, wantStep: plugins.StepOpenDevice,
			wantCause: []string{"$DEV/davinci1 exists but this user (uid ", ") cannot open it read-write: permission denied"},
			wantHints: []string{"HwHiAiUser", "ls -l $DEV/davinci1"},
			wantErrno: "EACCES", wantNPU: 1, wantSrc: "transports.ascend.npu_id", wantNPUs: []int{0, 1},
		},
		{
			name: "driver node not accessible", scenario: "two-npus", npuID: 0, access: denied("davinci_manager"),
			wantCheck: CheckDriver, wantStep: plugins.StepOpenDevice,
			wantCause: []string{"$DEV/davinci_manager exists but this user"},
			wantErrno: "EACCES", wantNPU: 0, wantSrc: "transports.ascend.npu_id", wantNPUs: []int{0, 1},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dev := fixtureDev(t, tt.scenario)
			o := ProbeOptions{NPUID: tt.npuID, DevRoot: dev, AscendHome: t.TempDir(), Getenv: env(tt.env...),
				load: noLibrary, access: tt.access}
			r := Probe(context.Background(), o)
			expand := func(s string) string { return strings.ReplaceAll(s, "$DEV", dev) }

			if r.NPUID != tt.wantNPU || r.NPUIDSource != tt.wantSrc {
				t.Errorf("NPU id %d from %q; want %d from %q", r.NPUID, r.NPUIDSource, tt.wantNPU, tt.wantSrc)
			}
			if !reflect.DeepEqual(r.NPUs, tt.wantNPUs) {
				t.Errorf("NPUs %v; want %v", r.NPUs, tt.wantNPUs)
			}
			if r.DevRoot != dev {
				t.Errorf("DevRoot %q; want %q", r.DevRoot, dev)
			}
			names := []string{}
			for _, c := range r.Checks {
				names = append(names, c.Name)
			}
			if want := []string{CheckDriver, CheckNPUID, CheckNPUDevice, CheckSVM, CheckHDC, CheckLibrary}; !reflect.DeepEqual(names, want) {
				t.Fatalf("checks %v; want %v", names, want)
			}
			p := r.Problem()
			if tt.wantCheck == "" {
				for _, name := range []string{CheckDriver, CheckNPUID, CheckNPUDevice, CheckSVM, CheckHDC} {
					if c, _ := r.Check(name); c.Status != StatusOK {
						t.Errorf("check %s: %s %s; want ok", name, c.Status, c.Detail)
					}
				}
				if p == nil || p.Step != plugins.StepLoadLibrary {
					t.Errorf("problem %v; want the library (none in this test)", p)
				}
				return
			}
			if p == nil {
				t.Fatalf("no problem found; want check %s to fail", tt.wantCheck)
			}
			c, _ := r.Check(tt.wantCheck)
			if c.Status != StatusFail || c.Diagnosis != p {
				t.Fatalf("check %s: %s; want it to be the first failure (problem: %v)", tt.wantCheck, c.Status, p)
			}
			if p.Transport != Name || p.Step != tt.wantStep {
				t.Errorf("diagnosis %s/%s; want %s/%s", p.Transport, p.Step, Name, tt.wantStep)
			}
			for _, want := range tt.wantCause {
				containsAll(t, "cause", p.Cause, expand(want))
			}
			hints := strings.Join(p.Hints, "\n")
			for _, want := range tt.wantHints {
				containsAll(t, "hints", hints, expand(want))
			}
			if p.NativeName != tt.wantErrno {
				t.Errorf("native name %q; want %q", p.NativeName, tt.wantErrno)
			}
			if tt.wantErrno != "" && p.NativeCode == 0 {
				t.Errorf("native code 0 for %s", tt.wantErrno)
			}
			if !errorsIs(p, plugins.ErrUnavailable) {
				t.Errorf("diagnosis does not wrap ErrUnavailable: %v", p)
			}
			if tt.wantCheck == CheckNPUID {
				if c, _ := r.Check(CheckNPUDevice); c.Status != StatusSkip {
					t.Errorf("npu device check %s; want skipped without an NPU id", c.Status)
				}
			}
		})
	}
}

func TestProbeCanceled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	r := Probe(ctx, ProbeOptions{NPUID: 0, DevRoot: fixtureDev(t, "no-driver"), Getenv: env(), load: noLibrary})
	if p := r.Problem(); p != nil {
		t.Errorf("canceled probe reports %v", p)
	}
	for _, c := range r.Checks {
		if c.Status != StatusSkip || !strings.Contains(c.Detail, "context canceled") {
			t.Errorf("check %s: %s %q; want skipped, canceled", c.Name, c.Status, c.Detail)
		}
	}
}

// libCase sets up a library scenario in a temporary directory and returns
// the probe options and the values the expectations mention.
type libCase struct {
	name  string
	setup func(t *testing.T) (o ProbeOptions, vars map[string]string)

	wantLib      string   // Report.Library ("" = not loaded)
	wantSearched []string // Report.Searched prefix
	wantCause    []string
	wantHints    []string
}

func TestProbeLibrary(t *testing.T) {
	needLoader(t)
	tests := []libCase{
		{
			name: "ascend_home/lib64",
			setup: func(t *testing.T) (ProbeOptions, map[string]string) {
				home := goodToolkit(t)
				return ProbeOptions{AscendHome: home, Getenv: env()}, map[string]string{"$H": home}
			},
			wantLib:      "$H/lib64/libascendcl.so",
			wantSearched: []string{"$H/lib64/libascendcl.so (transports.ascend.ascend_home)"},
		},
		{
			name: "ASCEND_HOME_PATH/runtime/lib64",
			setup: func(t *testing.T) (ProbeOptions, map[string]string) {
				home := t.TempDir()
				compileLib(t, filepath.Join(home, "runtime", "lib64"), Library, srcACL)
				return ProbeOptions{Getenv: env(EnvAscendHome, home)}, map[string]string{"$H": home}
			},
			wantLib: "$H/runtime/lib64/libascendcl.so",
			wantSearched: []string{"$H/lib64/libascendcl.so (ASCEND_HOME_PATH)",
				"$H/runtime/lib64/libascendcl.so (ASCEND_HOME_PATH)"},
		},
		{
			name: "LD_LIBRARY_PATH entry",
			setup: func(t *testing.T) (ProbeOptions, map[string]string) {
				home, empty, dir := t.TempDir(), t.TempDir(), t.TempDir()
				compileLib(t, dir, Library, srcACL)
				return ProbeOptions{AscendHome: home, Getenv: env(EnvLDLibraryPath, empty+"::"+dir)},
					map[string]string{"$H": home, "$E": empty, "$D": dir}
			},
			wantLib: "$D/libascendcl.so",
			wantSearched: []string{"$H/lib64/libascendcl.so (transports.ascend.ascend_home)",
				"$H/runtime/lib64/libascendcl.so (transports.ascend.ascend_home)",
				"$E/libascendcl.so (LD_LIBRARY_PATH)", "$D/libascendcl.so (LD_LIBRARY_PATH)"},
		},
		{
			name: "ascend_home before LD_LIBRARY_PATH",
			setup: func(t *testing.T) (ProbeOptions, map[string]string) {
				home, dir := goodToolkit(t), t.TempDir()
				compileLib(t, dir, Library, srcACL)
				return ProbeOptions{Getenv: env(EnvAscendHome, home, EnvLDLibraryPath, dir)}, map[string]string{"$H": home}
			},
			wantLib:      "$H/lib64/libascendcl.so",
			wantSearched: []string{"$H/lib64/libascendcl.so (ASCEND_HOME_PATH)"},
		},
		{
			name: "not found anywhere",
			setup: func(t *testing.T) (ProbeOptions, map[string]string) {
				if _, err := dlopenLoader(Library, Symbol); err == nil {
					t.Skip("this host has libascendcl.so on the system loader's path")
				}
				home, dir := t.TempDir(), t.TempDir()
				return ProbeOptions{Getenv: env(EnvAscendHome, home, EnvLDLibraryPath, dir)}, map[string]string{"$H": home, "$D": dir}
			},
			wantSearched: []string{"$H/lib64/libascendcl.so (ASCEND_HOME_PATH)", "$H/runtime/lib64/libascendcl.so (ASCEND_HOME_PATH)",
				"$D/libascendcl.so (LD_LIBRARY_PATH)",
				"the system loader's default path (dlopen: libascendcl.so: cannot open shared object file: No such file or directory)"},
			wantCause: []string{"libascendcl.so not found; searched $H/lib64/libascendcl.so (ASCEND_HOME_PATH), $H/runtime/lib64/libascendcl.so (ASCEND_HOME_PATH), $D/libascendcl.so (LD_LIBRARY_PATH), the system loader's default path (dlopen: libascendcl.so: cannot open shared object file"},
			wantHints: []string{"source /usr/local/Ascend/ascend-toolkit/set_env.sh", "set ASCEND_HOME_PATH (or transports.ascend.ascend_home)", "install the CANN toolkit"},
		},
		{
			name: "default toolkit, nothing set",
			setup: func(t *testing.T) (ProbeOptions, map[string]string) {
				if _, err := os.Stat(DefaultAscendHome); err == nil {
					t.Skip(DefaultAscendHome + " exists on this host")
				}
				if _, err := dlopenLoader(Library, Symbol); err == nil {
					t.Skip("this host has libascendcl.so on the system loader's path")
				}
				return ProbeOptions{Getenv: env()}, nil
			},
			wantSearched: []string{DefaultAscendHome + "/lib64/libascendcl.so (default; ASCEND_HOME_PATH is not set)"},
			wantCause:    []string{"libascendcl.so not found", "(default; ASCEND_HOME_PATH is not set)"},
		},
		{
			name: "damaged file",
			setup: func(t *testing.T) (ProbeOptions, map[string]string) {
				home, err := filepath.Abs(filepath.Join("testdata", "broken-toolkit", "latest"))
				if err != nil {
					t.Fatal(err)
				}
				return ProbeOptions{AscendHome: home, Getenv: env()}, map[string]string{"$H": home}
			},
			wantCause: []string{"cannot load $H/lib64/libascendcl.so (transports.ascend.ascend_home): dlopen: $H/lib64/libascendcl.so: invalid ELF header"},
			wantHints: []string{"not a shared library for this machine", "ldd $H/lib64/libascendcl.so", "set_env.sh"},
		},
		{
			name: "driver library missing",
			setup: func(t *testing.T) (ProbeOptions, map[string]string) {
				home, hal := t.TempDir(), t.TempDir()
				halLib := compileLib(t, hal, "libascend_hal.so", srcHAL)
				compileLib(t, filepath.Join(home, "lib64"), Library, srcACLOnHAL, "-L"+hal, "-lascend_hal", "-Wl,-rpath,"+hal)
				if err := os.Remove(halLib); err != nil {
					t.Fatal(err)
				}
				return ProbeOptions{AscendHome: home, Getenv: env()}, map[string]string{"$H": home}
			},
			wantCause: []string{"cannot load $H/lib64/libascendcl.so (transports.ascend.ascend_home): dlopen: libascend_hal.so: cannot open shared object file: No such file or directory"},
			wantHints: []string{"add /usr/local/Ascend/driver/lib64, /usr/local/Ascend/driver/lib64/common and /usr/local/Ascend/driver/lib64/driver to LD_LIBRARY_PATH", "ldd $H/lib64/libascendcl.so"},
		},
		{
			name: "driver and toolkit do not match",
			setup: func(t *testing.T) (ProbeOptions, map[string]string) {
				home, hal := t.TempDir(), t.TempDir()
				compileLib(t, hal, "libascend_hal.so", srcHAL)
				compileLib(t, filepath.Join(home, "lib64"), Library, srcACLOnHAL, "-L"+hal, "-lascend_hal", "-Wl,-rpath,"+hal)
				compileLib(t, hal, "libascend_hal.so", srcHALOld)
				return ProbeOptions{AscendHome: home, Getenv: env()}, map[string]string{"$H": home}
			},
			wantCause: []string{"cannot load $H/lib64/libascendcl.so (transports.ascend.ascend_home): dlopen: ", "undefined symbol: halGetDeviceInfo"},
			wantHints: []string{"install a CANN toolkit that matches the driver's version"},
		},
		{
			name: "not the CANN library",
			setup: func(t *testing.T) (ProbeOptions, map[string]string) {
				dir := t.TempDir()
				compileLib(t, dir, Library, srcNoSymbol)
				return ProbeOptions{AscendHome: t.TempDir(), Getenv: env(EnvLDLibraryPath, dir)}, map[string]string{"$D": dir}
			},
			wantCause: []string{"$D/libascendcl.so (LD_LIBRARY_PATH) loads but does not export aclInit (dlsym: ", "aclInit", "it is not the CANN runtime library"},
			wantHints: []string{"reinstall the CANN toolkit"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { runLibCase(t, tt) })
	}
}

// TestProbeLibraryWithoutCgo covers the diagnosis of a build that cannot
// dlopen: the real stub when built without cgo, a stand-in otherwise.
func TestProbeLibraryWithoutCgo(t *testing.T) {
	home := t.TempDir()
	lib := filepath.Join(home, "lib64", Library)
	if err := os.MkdirAll(filepath.Dir(lib), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(lib, []byte("stand-in"), 0o644); err != nil {
		t.Fatal(err)
	}
	o := ProbeOptions{NPUID: 0, DevRoot: fixtureDev(t, "two-npus"), AscendHome: home, Getenv: env()}
	if cgoLoader {
		o.load = func(string, string) (string, error) { return "", errNoCgo }
	}
	p := Probe(context.Background(), o).Problem()
	if p == nil || p.Step != plugins.StepLoadLibrary {
		t.Fatalf("problem %v; want %s", p, plugins.StepLoadLibrary)
	}
	containsAll(t, "cause", p.Cause, "found "+lib+" (transports.ascend.ascend_home) but cannot load libascendcl without cgo", "CGO_ENABLED=0")
	containsAll(t, "hints", strings.Join(p.Hints, "\n"), "CGO_ENABLED=1")

	if !cgoLoader {
		// Nothing found: the system loader cannot be asked without cgo.
		r := Probe(context.Background(), ProbeOptions{NPUID: 0, DevRoot: fixtureDev(t, "two-npus"), AscendHome: t.TempDir(), Getenv: env()})
		p := r.Problem()
		if p == nil || p.Step != plugins.StepLoadLibrary {
			t.Fatalf("problem %v; want %s", p, plugins.StepLoadLibrary)
		}
		containsAll(t, "cause", p.Cause, "libascendcl.so not found", "the system loader's default path (not tried: cannot load libascendcl without cgo)")
	}
}

func runLibCase(t *testing.T, tt libCase) {
	o, vars := tt.setup(t)
	o.NPUID, o.DevRoot = 0, fixtureDev(t, "two-npus")
	expand := func(s string) string {
		for k, v := range vars {
			s = strings.ReplaceAll(s, k, v)
		}
		return s
	}
	r := Probe(context.Background(), o)
	c, _ := r.Check(CheckLibrary)
	if len(tt.wantSearched) > len(r.Searched) {
		t.Errorf("searched %q; want it to start with %q", r.Searched, tt.wantSearched)
	} else {
		for i, want := range tt.wantSearched {
			if got := r.Searched[i]; got != expand(want) {
				t.Errorf("searched[%d] = %q; want %q", i, got, expand(want))
			}
		}
	}
	if tt.wantLib != "" {
		if c.Status != StatusOK || r.Problem() != nil {
			t.Fatalf("library check %s %q (problem %v); want ok", c.Status, c.Detail, r.Problem())
		}
		if r.Library != expand(tt.wantLib) {
			t.Errorf("library %q; want %q", r.Library, expand(tt.wantLib))
		}
		return
	}
	p := r.Problem()
	if c.Status != StatusFail || p != c.Diagnosis {
		t.Fatalf("library check %s %q (problem %v); want the first failure", c.Status, c.Detail, p)
	}
	if p.Step != plugins.StepLoadLibrary || !errorsIs(p, plugins.ErrUnavailable) {
		t.Errorf("diagnosis %s %v; want %s wrapping ErrUnavailable", p.Step, p.Err, plugins.StepLoadLibrary)
	}
	if r.Library != "" {
		t.Errorf("library %q set on failure", r.Library)
	}
	for _, want := range tt.wantCause {
		containsAll(t, "cause", p.Cause, expand(want))
	}
	hints := strings.Join(p.Hints, "\n")
	for _, want := range tt.wantHints {
		containsAll(t, "hints", hints, expand(want))
	}
	t.Logf("%s\nhints:\n  %s", p.Error(), strings.Join(p.Hints, "\n  "))
}

func TestReportJSON(t *testing.T) {
	r := Probe(context.Background(), ProbeOptions{NPUID: 5, DevRoot: fixtureDev(t, "two-npus"), AscendHome: t.TempDir(), Getenv: env(), load: noLibrary})
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"npu_id":5`, `"npus":[0,1]`, `"name":"npu device","status":"fail"`, `"step":"open device"`, `"native_name":"ENOENT"`, `"hints":[`} {
		containsAll(t, "JSON", string(b), want)
	}
	var back Report
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	p, q := r.Problem(), back.Problem()
	if q == nil || q.Step != p.Step || q.Cause != p.Cause || !reflect.DeepEqual(q.Hints, p.Hints) || q.NativeCode != p.NativeCode ||
		!errorsIs(q, plugins.ErrUnavailable) {
		t.Fatalf("round trip: problem %+v; want %+v", q, p)
	}
}
