package ascend

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"

	"github.com/kvconnect/kvconnect/plugins"
)

// Library is the CANN runtime library the probe loads, and Symbol a
// function it must export.
const (
	Library = "libascendcl.so"
	Symbol  = "aclInit"
)

// DataPathUnavailable is the cause of the diagnosis Init ends with when
// everything the probe checks is present.
const DataPathUnavailable = "Ascend data path requires the CANN runtime; not available on this host"

// Check names, in the order Probe runs them. Init reports the first check
// that fails.
const (
	CheckDriver    = "driver"      // <dev_root>/davinci_manager
	CheckNPUID     = "npu id"      // the NPU id is set and an integer
	CheckNPUDevice = "npu device"  // <dev_root>/davinci<N>, readable and writable
	CheckSVM       = "devmm_svm"   // <dev_root>/devmm_svm
	CheckHDC       = "hisi_hdc"    // <dev_root>/hisi_hdc
	CheckLibrary   = "libascendcl" // libascendcl.so found and loadable
)

// Status is the outcome of one check.
type Status string

// Check outcomes.
const (
	StatusOK   Status = "ok"
	StatusFail Status = "fail"
	// StatusSkip is a check that could not run because an earlier one
	// failed (no NPU id: no device node to look for) or the probe was
	// canceled.
	StatusSkip Status = "skipped"
)

// Check is one thing the probe looked at.
type Check struct {
	Name   string `json:"name"`
	Status Status `json:"status"`
	// Detail says what was found, or why the check was skipped.
	Detail string `json:"detail"`
	// Diagnosis is set when Status is StatusFail: the step, the cause in
	// words, hints, and the errno where there is one. It wraps
	// plugins.ErrUnavailable.
	Diagnosis *plugins.InitError `json:"-"`
}

// diagnosisJSON is how a Check's Diagnosis is written in JSON.
type diagnosisJSON struct {
	Transport  string   `json:"transport"`
	Step       string   `json:"step"`
	Cause      string   `json:"cause"`
	Hints      []string `json:"hints,omitempty"`
	NativeCode int64    `json:"native_code,omitempty"`
	NativeName string   `json:"native_name,omitempty"`
}

type checkJSON struct {
	Name      string         `json:"name"`
	Status    Status         `json:"status"`
	Detail    string         `json:"detail"`
	Diagnosis *diagnosisJSON `json:"diagnosis,omitempty"`
}

// MarshalJSON writes the check with its diagnosis's fields (for
// `kvconnect doctor --json`).
func (c Check) MarshalJSON() ([]byte, error) {
	out := checkJSON{Name: c.Name, Status: c.Status, Detail: c.Detail}
	if d := c.Diagnosis; d != nil {
		out.Diagnosis = &diagnosisJSON{Transport: d.Transport, Step: d.Step, Cause: d.Cause, Hints: d.Hints,
			NativeCode: d.NativeCode, NativeName: d.NativeName}
	}
	return json.Marshal(out)
}

// UnmarshalJSON reads what MarshalJSON wrote; a diagnosis wraps
// plugins.ErrUnavailable again.
func (c *Check) UnmarshalJSON(b []byte) error {
	var in checkJSON
	if err := json.Unmarshal(b, &in); err != nil {
		return err
	}
	*c = Check{Name: in.Name, Status: in.Status, Detail: in.Detail}
	if d := in.Diagnosis; d != nil {
		c.Diagnosis = &plugins.InitError{Transport: d.Transport, Step: d.Step, Cause: d.Cause, Hints: d.Hints,
			NativeCode: d.NativeCode, NativeName: d.NativeName, Err: plugins.ErrUnavailable}
	}
	return nil
}

// Report is what Probe found, for `kvconnect doctor` and for Init.
type Report struct {
	// NPUID is the NPU id probed, -1 when none could be resolved, and
	// NPUIDSource where it came from ("transports.ascend.npu_id",
	// "ASCEND_NPU_PHY_ID", ...).
	NPUID       int    `json:"npu_id"`
	NPUIDSource string `json:"npu_id_source,omitempty"`
	// DevRoot is the directory the device nodes were looked up in, and
	// NPUs the ids N of the <DevRoot>/davinci<N> nodes present, ascending.
	DevRoot string `json:"dev_root"`
	NPUs    []int  `json:"npus"`
	// AscendHome is the CANN toolkit directory searched first, and
	// AscendHomeSource where it came from.
	AscendHome       string `json:"ascend_home"`
	AscendHomeSource string `json:"ascend_home_source"`
	// Library is the file libascendcl was loaded from; "" if it was not.
	Library string `json:"library,omitempty"`
	// Searched lists every place libascendcl.so was looked for, in order,
	// each with where that place came from.
	Searched []string `json:"searched"`
	// Checks are the checks in the order they ran.
	Checks []Check `json:"checks"`
}

// Problem is the diagnosis of the first check that failed, or nil when
// every check passed.
func (r Report) Problem() *plugins.InitError {
	for _, c := range r.Checks {
		if c.Status == StatusFail && c.Diagnosis != nil {
			return c.Diagnosis
		}
	}
	return nil
}

// Check returns the check called name and whether it ran.
func (r Report) Check(name string) (Check, bool) {
	for _, c := range r.Checks {
		if c.Name == name {
			return c, true
		}
	}
	return Check{}, false
}

// ProbeOptions say where to look. Empty fields take the defaults below.
type ProbeOptions struct {
	// NPUID is the configured NPU id; -1 (NoNPUID) means not configured,
	// and ASCEND_NPU_PHY_ID is read instead. Note the zero value is NPU 0.
	NPUID int
	// NPUIDSource names where NPUID came from, for messages. Default
	// "transports.ascend.npu_id".
	NPUIDSource string
	// DevRoot holds the device nodes. Default /dev.
	DevRoot string
	// AscendHome is the CANN toolkit directory. Default $ASCEND_HOME_PATH,
	// else /usr/local/Ascend/ascend-toolkit/latest.
	AscendHome string
	// Getenv reads ASCEND_NPU_PHY_ID, ASCEND_HOME_PATH and LD_LIBRARY_PATH.
	// Default os.Getenv. The system loader's own search (the last place
	// looked) always uses the environment the process started with.
	Getenv func(string) string

	// load and access replace dlopen and access(2) in tests.
	load   func(path, symbol string) (string, error)
	access func(path string) error
}

// loadError is a failed dlopen or dlsym, quoting dlerror.
type loadError struct {
	Call string // "dlopen" or "dlsym"
	Msg  string // dlerror()
}

func (e *loadError) Error() string { return e.Call + ": " + e.Msg }

// errNoCgo is what the loader returns in a build without cgo.
var errNoCgo = errors.New("cannot load libascendcl without cgo")

// Probe checks the host the way an Ascend operator debugs it: the driver's
// device nodes, the NPU id, the node of that NPU, and the CANN runtime
// library (found as libascendcl.so in $ASCEND_HOME_PATH/lib64,
// $ASCEND_HOME_PATH/runtime/lib64, each LD_LIBRARY_PATH entry, then the
// system loader's default path, and loaded with dlopen). Every check runs
// unless it depends on one that failed; Report.Problem is the first
// failure. Probe changes nothing on the host: it stats device nodes and
// loads and unloads the library.
func Probe(ctx context.Context, o ProbeOptions) Report {
	p := prober{o: o}
	if p.o.Getenv == nil {
		p.o.Getenv = os.Getenv
	}
	if p.o.load == nil {
		p.o.load = dlopenLoader
	}
	if p.o.access == nil {
		p.o.access = accessRW
	}
	if p.o.DevRoot == "" {
		p.o.DevRoot = DefaultDevRoot
	}
	if p.o.NPUIDSource == "" {
		p.o.NPUIDSource = "transports.ascend.npu_id"
	}
	r := &p.r
	r.NPUID = NoNPUID
	r.DevRoot = p.o.DevRoot
	r.NPUs = listNPUs(p.o.DevRoot)

	steps := []struct {
		name string
		run  func() Check
	}{
		{CheckDriver, p.checkDriver},
		{CheckNPUID, p.checkNPUID},
		{CheckNPUDevice, p.checkNPUDevice},
		{CheckSVM, p.checkSVM},
		{CheckHDC, p.checkHDC},
		{CheckLibrary, p.checkLibrary},
	}
	for _, s := range steps {
		if err := ctx.Err(); err != nil {
			r.Checks = append(r.Checks, Check{Name: s.name, Status: StatusSkip, Detail: "probe stopped: " + err.Error()})
			continue
		}
		c := s.run()
		c.Name = s.name
		r.Checks = append(r.Checks, c)
	}
	return p.r
}

type prober struct {
	o ProbeOptions
	r Report
}

func (p *prober) dev(name string) string { return filepath.Join(p.o.DevRoot, name) }

// listNPUs returns the N of every davinci<N> node in dir, ascending.
func listNPUs(dir string) []int {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var ids []int
	for _, e := range entries {
		if rest, ok := strings.CutPrefix(e.Name(), "davinci"); ok {
			if n, err := parseDecimal(rest, MaxNPUID); err == nil {
				ids = append(ids, n)
			}
		}
	}
	sort.Ints(ids)
	return ids
}

// npuList names the davinci nodes present: "/dev/davinci0, /dev/davinci1".
func (p *prober) npuList() string {
	if len(p.r.NPUs) == 0 {
		return "no " + p.dev("davinci<N>") + " nodes at all"
	}
	names := make([]string, len(p.r.NPUs))
	for i, n := range p.r.NPUs {
		names[i] = p.dev("davinci" + strconv.Itoa(n))
	}
	return strings.Join(names, ", ")
}

func (p *prober) npuIDs() string {
	ids := make([]string, len(p.r.NPUs))
	for i, n := range p.r.NPUs {
		ids[i] = strconv.Itoa(n)
	}
	return strings.Join(ids, ", ")
}

// diag builds a failed check.
func diag(step, cause string, hints ...string) Check {
	return Check{Status: StatusFail, Detail: cause, Diagnosis: &plugins.InitError{
		Transport: Name, Step: step, Cause: cause, Hints: hints, Err: plugins.ErrUnavailable,
	}}
}

// withErrno records the errno behind err in c's diagnosis.
func withErrno(c Check, err error) Check {
	var errno syscall.Errno
	if c.Diagnosis != nil && errors.As(err, &errno) {
		c.Diagnosis.NativeCode = int64(errno)
		c.Diagnosis.NativeName = errnoName(errno)
		c.Diagnosis.Err = fmt.Errorf("%w: %w", plugins.ErrUnavailable, err)
	}
	return c
}

const containerDevices = "--device=/dev/davinci_manager --device=/dev/devmm_svm --device=/dev/hisi_hdc --device=/dev/davinci<N>"

// node checks that a device node exists and that this user may open it
// read-write. missing builds the diagnosis for an absent node.
func (p *prober) node(name, step string, missing func(path string, err error) Check) Check {
	path := p.dev(name)
	fi, err := os.Stat(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return withErrno(missing(path, err), err)
		}
		return withErrno(diag(step, fmt.Sprintf("cannot stat %s: %v", path, err),
			"check that "+p.o.DevRoot+" is readable by this user"), err)
	}
	if err := p.o.access(path); err != nil {
		return withErrno(diag(plugins.StepOpenDevice,
			fmt.Sprintf("%s exists but this user (uid %d) cannot open it read-write: %v", path, os.Getuid(), err),
			"run the server as root or as a member of the node's group (the Ascend driver installs its nodes for the HwHiAiUser group): ls -l "+path,
			"in a container, run with the same uid/gid mapping the host uses for the Ascend devices"), err)
	}
	kind := "character device"
	if fi.Mode()&fs.ModeCharDevice == 0 {
		kind = "present, not a character device"
	}
	return Check{Status: StatusOK, Detail: path + " (" + kind + ")"}
}

func (p *prober) checkDriver() Check {
	return p.node("davinci_manager", plugins.StepProbeDevices, func(path string, err error) Check {
		cause := fmt.Sprintf("no %s: the Ascend NPU driver is not installed on this host, or its devices are not passed into this container", path)
		if fi, serr := os.Stat(p.o.DevRoot); serr != nil || !fi.IsDir() {
			cause = fmt.Sprintf("device directory %s (transports.ascend.dev_root) does not exist, so there is no %s", p.o.DevRoot, path)
		}
		return diag(plugins.StepProbeDevices, cause,
			"on an Ascend host, `npu-smi info` must list the NPUs; if it does not, install the Ascend NPU driver and firmware and reboot",
			"in a container, pass the driver's devices: "+containerDevices,
			"a host without Ascend NPUs is expected to fail here: the fallback chain moves on to the next transport")
	})
}

func (p *prober) checkNPUID() Check {
	present := "NPUs present: " + p.npuList()
	if p.o.NPUID >= 0 {
		if p.o.NPUID > MaxNPUID {
			return diag(plugins.StepConfigure, fmt.Sprintf("NPU id %d from %s is out of range (want 0-%d)", p.o.NPUID, p.o.NPUIDSource, MaxNPUID), present)
		}
		p.r.NPUID, p.r.NPUIDSource = p.o.NPUID, p.o.NPUIDSource
		return Check{Status: StatusOK, Detail: fmt.Sprintf("%d (from %s)", p.r.NPUID, p.r.NPUIDSource)}
	}
	if p.o.NPUID != NoNPUID {
		return diag(plugins.StepConfigure, fmt.Sprintf("NPU id %d from %s is not valid: want an NPU id 0-%d, or -1 for not set", p.o.NPUID, p.o.NPUIDSource, MaxNPUID), present)
	}
	setHint := "export " + EnvNPUPhyID + "=<id> with the physical id of this worker's NPU (the NPU column of `npu-smi info`)"
	if len(p.r.NPUs) > 0 {
		setHint += "; ids present here: " + p.npuIDs()
	}
	raw := p.o.Getenv(EnvNPUPhyID)
	v := strings.TrimSpace(raw)
	if v == "" || v == "-1" {
		state := "is not set"
		if v == "-1" {
			state = "is -1 (unset)"
		}
		return diag(plugins.StepConfigure,
			fmt.Sprintf("NPU id not set: %s is -1 and no local_device_index is configured, and %s %s", "transports.ascend.npu_id", EnvNPUPhyID, state),
			setHint,
			"or set local_device_index (the worker's device index, as SGLang uses the GPU id) or transports.ascend.npu_id",
			"or give the hostname as host:port:npu_N")
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return diag(plugins.StepConfigure,
			fmt.Sprintf("%s=%q is not an integer: want the physical NPU id (0, 1, ...) or -1 for unset", EnvNPUPhyID, raw),
			setHint)
	}
	if n < 0 || n > MaxNPUID {
		return diag(plugins.StepConfigure,
			fmt.Sprintf("%s=%q is out of range: want the physical NPU id 0-%d, or -1 for unset", EnvNPUPhyID, raw, MaxNPUID),
			setHint)
	}
	p.r.NPUID, p.r.NPUIDSource = n, EnvNPUPhyID
	return Check{Status: StatusOK, Detail: fmt.Sprintf("%d (from %s)", n, EnvNPUPhyID)}
}

func (p *prober) checkNPUDevice() Check {
	if p.r.NPUID < 0 {
		return Check{Status: StatusSkip, Detail: "no NPU id; " + p.dev("davinci<N>") + " present: " + p.npuList()}
	}
	n := p.r.NPUID
	name := "davinci" + strconv.Itoa(n)
	return p.node(name, plugins.StepOpenDevice, func(path string, err error) Check {
		hints := []string{}
		if len(p.r.NPUs) > 0 {
			hints = append(hints, fmt.Sprintf("use an NPU id this host has: %s (%s is the physical id from `npu-smi info`)", p.npuIDs(), EnvNPUPhyID))
		}
		hints = append(hints, "in a container, pass the node: --device="+filepath.Join(DefaultDevRoot, name))
		return diag(plugins.StepOpenDevice,
			fmt.Sprintf("no %s for NPU id %d (from %s): this host has %s", path, n, p.r.NPUIDSource, p.npuList()),
			hints...)
	})
}

func (p *prober) checkSVM() Check {
	return p.node("devmm_svm", plugins.StepProbeDevices, func(path string, err error) Check {
		return diag(plugins.StepProbeDevices,
			fmt.Sprintf("no %s: the Ascend driver's shared virtual memory device is missing; the runtime cannot allocate or map NPU memory without it", path),
			"in a container, pass it: --device=/dev/devmm_svm (with "+containerDevices+")",
			"on the host, a missing devmm_svm means the driver's kernel modules are not loaded: check `npu-smi info` and dmesg, reinstall the driver")
	})
}

func (p *prober) checkHDC() Check {
	return p.node("hisi_hdc", plugins.StepProbeDevices, func(path string, err error) Check {
		return diag(plugins.StepProbeDevices,
			fmt.Sprintf("no %s: the Ascend driver's host-device communication channel is missing; the runtime cannot reach the NPU without it", path),
			"in a container, pass it: --device=/dev/hisi_hdc (with "+containerDevices+")",
			"on the host, a missing hisi_hdc means the driver's kernel modules are not loaded: check `npu-smi info` and dmesg, reinstall the driver")
	})
}

// Hints shared by the library diagnoses.
const (
	hintSetEnv     = "source the CANN toolkit's environment before starting the server: source /usr/local/Ascend/ascend-toolkit/set_env.sh (it sets ASCEND_HOME_PATH and LD_LIBRARY_PATH)"
	hintAscendHome = "or set ASCEND_HOME_PATH (or transports.ascend.ascend_home) to the toolkit directory that holds lib64/libascendcl.so"
	hintDriverLibs = "libascendcl needs the driver's libraries (libascend_hal.so and others): add /usr/local/Ascend/driver/lib64, /usr/local/Ascend/driver/lib64/common and /usr/local/Ascend/driver/lib64/driver to LD_LIBRARY_PATH"
)

func (p *prober) checkLibrary() Check {
	home, from := p.o.AscendHome, "transports.ascend.ascend_home"
	if home == "" {
		if v := p.o.Getenv(EnvAscendHome); v != "" {
			home, from = v, EnvAscendHome
		} else {
			home, from = DefaultAscendHome, "default; "+EnvAscendHome+" is not set"
		}
	}
	p.r.AscendHome, p.r.AscendHomeSource = home, from
	type candidate struct{ path, from string }
	cands := []candidate{
		{filepath.Join(home, "lib64", Library), from},
		{filepath.Join(home, "runtime", "lib64", Library), from},
	}
	for _, dir := range filepath.SplitList(p.o.Getenv(EnvLDLibraryPath)) {
		if dir != "" {
			cands = append(cands, candidate{filepath.Join(dir, Library), EnvLDLibraryPath})
		}
	}
	seen := map[string]bool{}
	for _, c := range cands {
		if seen[c.path] {
			continue
		}
		seen[c.path] = true
		p.r.Searched = append(p.r.Searched, c.path+" ("+c.from+")")
		if _, err := os.Stat(c.path); errors.Is(err, fs.ErrNotExist) {
			continue
		}
		return p.load(c.path, c.path+" ("+c.from+")")
	}
	if !cgoLoader {
		p.r.Searched = append(p.r.Searched, "the system loader's default path (not tried: "+errNoCgo.Error()+")")
		return p.notFound()
	}
	resolved, err := p.o.load(Library, Symbol)
	var le *loadError
	if err != nil && errors.As(err, &le) && le.Call == "dlopen" && strings.HasPrefix(le.Msg, Library+":") {
		// dlopen could not find libascendcl.so itself (as opposed to a
		// dependency of it): not installed anywhere the loader looks.
		p.r.Searched = append(p.r.Searched, "the system loader's default path (dlopen: "+le.Msg+")")
		return p.notFound()
	}
	p.r.Searched = append(p.r.Searched, "the system loader's default path (ld.so.cache, /lib, /usr/lib)")
	if err != nil {
		return p.loadFailed(Library+" (found by the system loader)", err)
	}
	p.r.Library = resolved
	return Check{Status: StatusOK, Detail: resolved + " (found by the system loader; exports " + Symbol + ")"}
}

func (p *prober) notFound() Check {
	return diag(plugins.StepLoadLibrary,
		Library+" not found; searched "+strings.Join(p.r.Searched, ", "),
		hintSetEnv, hintAscendHome,
		"if the toolkit is not installed, install the CANN toolkit matching the driver's version")
}

// load dlopens a libascendcl.so that exists at path.
func (p *prober) load(path, label string) Check {
	resolved, err := p.o.load(path, Symbol)
	if err != nil {
		return p.loadFailed(label, err)
	}
	p.r.Library = resolved
	return Check{Status: StatusOK, Detail: label + ": loaded, exports " + Symbol}
}

func (p *prober) loadFailed(label string, err error) Check {
	if errors.Is(err, errNoCgo) {
		return diag(plugins.StepLoadLibrary,
			"found "+label+" but "+errNoCgo.Error()+": kvconnect-transport-ascend was built with CGO_ENABLED=0",
			"rebuild kvconnect-transport-ascend with CGO_ENABLED=1 (it needs gcc)")
	}
	var le *loadError
	if errors.As(err, &le) && le.Call == "dlsym" {
		return diag(plugins.StepLoadLibrary,
			fmt.Sprintf("%s loads but does not export %s (dlsym: %s): it is not the CANN runtime library", label, Symbol, le.Msg),
			"reinstall the CANN toolkit, and check that ASCEND_HOME_PATH and LD_LIBRARY_PATH point at it and at no other libascendcl.so",
			hintSetEnv)
	}
	msg := err.Error()
	hints := []string{}
	switch {
	case strings.Contains(msg, "cannot open shared object file"):
		hints = append(hints, hintDriverLibs)
	case strings.Contains(msg, "wrong ELF class"), strings.Contains(msg, "invalid ELF header"),
		strings.Contains(msg, "file too short"), strings.Contains(msg, "not an ELF"):
		hints = append(hints, "the file is not a shared library for this machine: a toolkit for another architecture (aarch64 vs x86_64), or a damaged install; reinstall the CANN toolkit")
	case strings.Contains(msg, "undefined symbol"):
		hints = append(hints, "the toolkit and the driver (or two toolkits) do not match: install a CANN toolkit that matches the driver's version, and put only one toolkit on LD_LIBRARY_PATH")
	}
	hints = append(hints, "check every dependency resolves: ldd "+strings.Fields(label)[0], hintSetEnv)
	return diag(plugins.StepLoadLibrary, fmt.Sprintf("cannot load %s: %s", label, msg), hints...)
}
