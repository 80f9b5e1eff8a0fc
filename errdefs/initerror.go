package errdefs

import (
	"fmt"
	"strings"
)

// InitError is the structured diagnosis of a transport that failed to
// initialise: which transport, which step, the native code, the cause in
// words and what to do about it. It wraps a sentinel (usually
// ErrUnavailable) so errors.Is drives the fallback chain.
type InitError struct {
	Transport  string   // transport name, e.g. "rdma"
	Step       string   // one of the Step* constants
	NativeCode int64    // errno or library return code; 0 if none
	NativeName string   // symbolic name of NativeCode, e.g. "ENOSYS", "FI_ENODATA"
	Cause      string   // what went wrong, in words
	Hints      []string // what to do about it
	Err        error    // wrapped sentinel or underlying error
}

// Steps at which a transport's initialisation can fail.
const (
	StepFindPlugin      = "find plugin"
	StepStartPlugin     = "start plugin"
	StepHandshake       = "handshake with plugin"
	StepLoadLibrary     = "load library"
	StepProbeDevices    = "probe devices"
	StepOpenDevice      = "open device"
	StepBind            = "bind"
	StepRegisterMemory  = "register memory"
	StepPublish         = "publish descriptor"
	StepConfigure       = "configure"
	StepDataPath        = "data path"
	StepInitPluginCrash = "init (plugin crashed)"
)

func (e *InitError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %s failed", e.Transport, e.Step)
	if e.NativeCode != 0 || e.NativeName != "" {
		b.WriteString(" (")
		if e.NativeName != "" {
			b.WriteString(e.NativeName)
			if e.NativeCode != 0 {
				b.WriteString(" ")
			}
		}
		if e.NativeCode != 0 {
			fmt.Fprintf(&b, "%d", e.NativeCode)
		}
		b.WriteString(")")
	}
	b.WriteString(": ")
	b.WriteString(e.Cause)
	return b.String()
}

// Unwrap returns the wrapped sentinel or underlying error.
func (e *InitError) Unwrap() error { return e.Err }
