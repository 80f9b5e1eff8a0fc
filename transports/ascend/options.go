package ascend

import (
	"fmt"
	"path/filepath"

	"github.com/kvconnect/kvconnect/plugins"
)

// Default locations, as the Ascend driver and the CANN toolkit install them.
const (
	// DefaultDevRoot holds the driver's device nodes.
	DefaultDevRoot = "/dev"
	// DefaultAscendHome is the CANN toolkit used when neither
	// transports.ascend.ascend_home nor ASCEND_HOME_PATH is set.
	DefaultAscendHome = "/usr/local/Ascend/ascend-toolkit/latest"
	// NoNPUID means no NPU id is configured.
	NoNPUID = -1
)

// Environment variables the transport reads.
const (
	// EnvNPUPhyID is SGLang's physical NPU id; -1 or empty means unset.
	EnvNPUPhyID = "ASCEND_NPU_PHY_ID"
	// EnvAscendHome is the CANN toolkit directory set_env.sh exports.
	EnvAscendHome = "ASCEND_HOME_PATH"
	// EnvLDLibraryPath is searched for libascendcl.so after ASCEND_HOME_PATH.
	EnvLDLibraryPath = "LD_LIBRARY_PATH"
)

// Options is the ascend transport's config subtree (transports.ascend).
type Options struct {
	// NPUID is this worker's NPU id, N in the segment name host:port:npu_N.
	// -1 (the default) means not configured: the config layer fills it from
	// ASCEND_NPU_PHY_ID or local_device_index; when it is still -1 the
	// transport takes the npu_N of a host:port:npu_N hostname, then reads
	// ASCEND_NPU_PHY_ID from its own environment.
	NPUID int `json:"npu_id"`
	// DevRoot is the directory holding the driver's device nodes
	// (davinci_manager, davinciN, devmm_svm, hisi_hdc). Default /dev.
	DevRoot string `json:"dev_root"`
	// AscendHome is the CANN toolkit directory searched for libascendcl.so
	// (lib64, runtime/lib64). Empty means $ASCEND_HOME_PATH, else
	// /usr/local/Ascend/ascend-toolkit/latest.
	AscendHome string `json:"ascend_home"`
	// Port is the port in the published segment name host:port:npu_N;
	// 0 picks a free one, as SGLang does.
	Port int `json:"port"`
}

// DefaultOptions are the options used for keys the config leaves out.
func DefaultOptions() Options {
	return Options{NPUID: NoNPUID, DevRoot: DefaultDevRoot}
}

func (o Options) validate() error {
	bad := func(key string, v any, allowed string) error {
		return fmt.Errorf("ascend: option transports.ascend.%s = %v: %s: %w", key, v, allowed, plugins.ErrInvalidArgument)
	}
	switch {
	case o.NPUID < NoNPUID || o.NPUID > MaxNPUID:
		return bad("npu_id", o.NPUID, fmt.Sprintf("must be an NPU id 0-%d, or -1 for not set", MaxNPUID))
	case o.DevRoot == "" || !filepath.IsAbs(o.DevRoot):
		return bad("dev_root", fmt.Sprintf("%q", o.DevRoot), "must be an absolute directory such as /dev")
	case o.AscendHome != "" && !filepath.IsAbs(o.AscendHome):
		return bad("ascend_home", fmt.Sprintf("%q", o.AscendHome), "must be an absolute directory such as "+DefaultAscendHome+", or empty for $ASCEND_HOME_PATH")
	case o.Port < 0 || o.Port > 65535:
		return bad("port", o.Port, "must be between 0 and 65535 (0 picks a free port)")
	}
	return nil
}
