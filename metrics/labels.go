package metrics

import (
	"errors"
	"strings"

	"github.com/kvconnect/kvconnect/errdefs"
	"github.com/kvconnect/kvconnect/plugins"
)

// Label values are bounded: every value a label can take is listed here,
// or is a transport name (bounded by the configuration), or "other".

// Results of an op a node initiated, as connector.StatusOf classifies them.
const (
	ResultCompleted = "completed"
	ResultFailed    = "failed"
	ResultTimeout   = "timeout"
	ResultCanceled  = "canceled"
)

// other stands for any value outside a label's known set.
const other = "other"

const (
	resCompleted = iota
	resFailed
	resTimeout
	resCanceled
	numResults
)

var initiatedResults = [numResults]string{ResultCompleted, ResultFailed, ResultTimeout, ResultCanceled}

// resultOf classifies an op's error.
func resultOf(err error) int {
	switch {
	case err == nil:
		return resCompleted
	case errors.Is(err, errdefs.ErrTimeout):
		return resTimeout
	case errors.Is(err, errdefs.ErrCanceled):
		return resCanceled
	}
	return resFailed
}

// opLabel is an op kind's label value: "read" or "write".
func opLabel(k plugins.OpKind) string {
	switch k {
	case plugins.OpRead:
		return "read"
	case plugins.OpWrite:
		return "write"
	}
	return other
}

var opLabels = [2]string{plugins.OpRead: "read", plugins.OpWrite: "write"}

// stepLabel is a diagnosis step as a label value: the errdefs.Step*
// constants in snake case ("probe devices" -> probe_devices), "init" for a
// failure without a diagnosis, "other" for anything else.
func stepLabel(step string) string {
	switch step {
	case errdefs.StepFindPlugin, errdefs.StepStartPlugin, errdefs.StepHandshake, errdefs.StepLoadLibrary,
		errdefs.StepProbeDevices, errdefs.StepOpenDevice, errdefs.StepBind, errdefs.StepRegisterMemory,
		errdefs.StepPublish, errdefs.StepConfigure, errdefs.StepDataPath, "init":
		return strings.ReplaceAll(step, " ", "_")
	case errdefs.StepInitPluginCrash:
		return "init_plugin_crashed"
	case "":
		return "init"
	}
	return other
}

// kindLabel is the error kind of err as a label value: "ok" for nil, the
// first sentinel's wire name (errdefs.Kind, a fixed set), or "other".
func kindLabel(err error) string {
	if err == nil {
		return "ok"
	}
	if k := errdefs.Kind(err); k != "" {
		return k
	}
	return other
}

// oneOf returns v if it is in known, else "other".
func oneOf(v string, known []string) string {
	for _, k := range known {
		if v == k {
			return v
		}
	}
	return other
}
