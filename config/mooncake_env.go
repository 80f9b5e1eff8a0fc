package config

import (
	"sort"
	"strings"
)

// Mooncake Transfer Engine reads many MC_* variables that have no
// counterpart here (RDMA queue tuning, GPU copy engines, its own log
// directory). A user moving from Mooncake may still have them set, and
// expects them to act: kvconnect says, once per variable, that it does not
// read one, and what it has instead where it has something.

// mooncakeLogLevels maps MC_LOG_LEVEL (glog levels, as Mooncake compares
// them) to log_level.
var mooncakeLogLevels = map[string]string{"TRACE": "debug", "INFO": "info", "WARNING": "warn", "ERROR": "error"}

const (
	hintRDMA     = "Mooncake's RDMA tuning; kvconnect's rdma transport runs on UCX: transports.rdma.ucx_config takes UCX's variables for it (IB_TRAFFIC_CLASS, IB_SL, ...; docs/RDMA.md, docs/UCX.md), beside transports.rdma.gid_index and ib_port (MC_GID_INDEX, MC_IB_PORT)"
	hintTCPConns = "kvconnect's tcp transport always keeps persistent connections to a peer: transports.tcp.connections of them (KVCONNECT_TRANSPORTS__TCP__CONNECTIONS)"
	hintSlice    = "kvconnect's tcp transport splits requests into transports.tcp.chunk_size pieces (KVCONNECT_TRANSPORTS__TCP__CHUNK_SIZE)"
	hintTimeout  = "a batch is bounded by transfer_timeout (MC_TRANSFER_TIMEOUT), one tcp request by transports.tcp.op_timeout"
	hintMetaSync = "kvconnect reads a peer's segment descriptor when it connects and again whenever it reconnects"
	hintMetrics  = "kvconnect exports Prometheus metrics at metrics_address (KVCONNECT_METRICS_ADDRESS), docs/OBSERVABILITY.md"
	hintRPCPorts = "read by the C library and the Python engine, which pick their RPC port in this range; this program binds rpc_port (KVCONNECT_RPC_PORT; 0 = any free port)"
	hintNone     = ""
)

// mooncakeUnread lists the Mooncake Transfer Engine variables kvconnect
// does not read (those of Mooncake's source, transfer engine and common
// code, in December 2026), each with what kvconnect has instead ("" =
// nothing). Other MC_* variables (Mooncake Store's, say) are left alone.
var mooncakeUnread = map[string]string{
	"MC_HANDSHAKE_PORT":                       "kvconnect's handshake listens on rpc_port (KVCONNECT_RPC_PORT); in P2PHANDSHAKE mode the C library and the Python engine pick it in MC_MIN_RPC_PORT..MC_MAX_RPC_PORT",
	"MC_HANDSHAKE_CONNECT_TIMEOUT":            "connecting and the handshake are bounded by connect_timeout (KVCONNECT_CONNECT_TIMEOUT)",
	"MC_HANDSHAKE_MAX_LENGTH":                 "the largest handshake frame is max_handshake_frame (KVCONNECT_MAX_HANDSHAKE_FRAME, default 16MiB)",
	"MC_HANDSHAKE_LISTEN_BACKLOG":             hintNone,
	"MC_MIN_RPC_PORT":                         hintRPCPorts,
	"MC_MAX_RPC_PORT":                         hintRPCPorts,
	"MC_MIN_PRC_PORT":                         hintRPCPorts,
	"MC_MAX_PRC_PORT":                         hintRPCPorts,
	"MC_LEGACY_RPC_PORT_BINDING":              hintNone,
	"MC_RPC_PROTOCOL":                         hintNone,
	"MC_USE_IPV6":                             hintNone,
	"MC_LOG_DIR":                              "kvconnect logs to stderr (log_format json for a collector)",
	"MC_TE_METRIC":                            hintMetrics,
	"MC_TE_METRIC_INTERVAL_SECONDS":           hintMetrics,
	"MC_TE_FILTERS":                           hintNone,
	"MC_DISABLE_METACACHE":                    hintMetaSync,
	"MC_TE_METADATA_REFRESH_INTERVAL_SECONDS": hintMetaSync,
	"MC_TCP_ENABLE_CONNECTION_POOL":           hintTCPConns,
	"MC_TCP_LANES_PER_PEER":                   hintTCPConns,
	"MC_TCP_MAX_CONNECTIONS_PER_PEER":         hintTCPConns,
	"MC_TCP_MAX_QUEUED_TRANSFERS_PER_PEER":    hintNone,
	"MC_TCP_MAX_PENDING_ADMISSIONS_PER_PEER":  hintNone,
	"MC_TCP_ADMISSION_TIMEOUT_MS":             hintNone,
	"MC_TCP_STATUS_TIMEOUT_SEC":               hintTimeout,
	"MC_SLICE_TIMEOUT":                        hintTimeout,
	"MC_TCP_SLICE_SIZE":                       hintSlice,
	"MC_SLICE_SIZE":                           hintSlice,
	"MC_FRAGMENT_RATIO":                       hintSlice,
	"MC_MTU":                                  hintRDMA,
	"MC_IB_SL":                                hintRDMA,
	"MC_IB_TC":                                hintRDMA,
	"MC_IB_PCI_RELAXED_ORDERING":              hintRDMA,
	"MC_PKEY_INDEX":                           hintRDMA,
	"MC_AUTO_GID_MAX_RETRIES":                 hintRDMA,
	"MC_RETRY_CNT":                            hintRDMA,
	"MC_MAX_WR":                               hintRDMA,
	"MC_MAX_SGE":                              hintRDMA,
	"MC_MAX_INLINE":                           hintRDMA,
	"MC_MAX_CQE_PER_CTX":                      hintRDMA,
	"MC_MAX_EP_PER_CTX":                       hintRDMA,
	"MC_NUM_QP_PER_EP":                        hintRDMA,
	"MC_NUM_CQ_PER_CTX":                       hintRDMA,
	"MC_NUM_COMP_CHANNELS_PER_CTX":            hintRDMA,
	"MC_WORKERS_PER_CTX":                      hintRDMA,
	"MC_MAX_MR_SIZE":                          hintRDMA,
	"MC_MIN_REG_SIZE":                         hintRDMA,
	"MC_ENABLE_PARALLEL_REG_MR":               hintRDMA,
	"MC_MAX_CONCURRENT_REG_MR":                hintRDMA,
	"MC_ENABLE_DEST_DEVICE_AFFINITY":          hintRDMA,
	"MC_ENABLE_HCA_PEER_AFFINITY":             hintRDMA,
	"MC_NIC_PEER_AFFINITY":                    hintRDMA,
	"MC_ENDPOINT_STORE_TYPE":                  hintRDMA,
	"MC_MLX5_QP_LAG_PORT_BALANCE":             hintRDMA,
	"MC_MLX5_QP_UDP_SPORTS":                   hintRDMA,
	"MC_RDMA_RAIL_PAUSE_SECONDS":              hintRDMA,
	"MC_RDMA_BIND_ADDRESS":                    hintRDMA,
	"MC_CONN_PAUSE_TTL_MS":                    hintRDMA,
	"MC_PATH_ROUNDROBIN":                      hintRDMA,
	"MC_TRACK_RDMA_POSTED_SLICES":             hintRDMA,
	"MC_LOG_RDMA_SLICE_AFFINITY":              hintRDMA,
	"MC_CUSTOM_TOPO_JSON":                     hintRDMA,
	"MC_EFA_NIC_SELECTION":                    "kvconnect's efa transport uses one EFA device: the first of device_name, or transports.efa.domain",
	"MC_USE_TENT":                             hintNone,
	"MC_USE_TEV1":                             hintNone,
	"MC_USE_NVLINK_IPC":                       hintNone,
	"MC_INTRANODE_NVLINK":                     hintNone,
	"MC_FORCE_MNNVL":                          hintNone,
	"MC_USE_HIP_IPC":                          hintNone,
	"MC_HIP_NUM_STREAMS":                      hintNone,
	"MC_HIP_NUM_EVENTS":                       hintNone,
	"MC_DISABLE_HIP":                          hintNone,
	"MC_FORCE_MUSA":                           hintNone,
	"MC_DISABLE_MUSA":                         hintNone,
	"MC_MUSA_COPY_API":                        hintNone,
	"MC_MUSA_IPC_OPEN_DEVICE":                 hintNone,
	"MC_MUSA_TRANSFER_BATCH_MIN_BYTES":        hintNone,
	"MC_DISABLE_MACA":                         hintNone,
	"MC_MACA_COPY_API":                        hintNone,
	"MC_MACA_CALLER_SYNC":                     hintNone,
	"MC_MACA_HOST_TRANSPORT":                  hintNone,
	"MC_MACA_BATCHFLAG_MIN_BYTES":             hintNone,
	"MC_TANGRT_ROOT":                          hintNone,
	"MC_TANGRT_LIB_DIR":                       hintNone,
	"MC_TANGRT_LIB_ARCH":                      hintNone,
	"MC_USE_UBSHMEM_IPC":                      hintNone,
	"MC_UBSHMEM_THREAD_POOL_SIZE":             hintNone,
	"MC_UBSHMEM_STREAMS_PER_TRANSFER":         hintNone,
	"MC_UBSHMEM_MAX_STREAMS":                  hintNone,
	"MC_UBSHMEM_GET_STREAM_TIMEOUT":           hintNone,
	"MC_CXL_DEV_PATH":                         hintNone,
	"MC_CXL_DEV_SIZE":                         hintNone,
	"MC_DISABLE_GPU_DIRECT_RDMA":              hintNone,
	"MC_EFA_CQ_THREADS":                       hintNone,
	"MC_ENABLE_MNNVL":                         hintNone,
	"MC_INTRA_NVLINK":                         hintNone,
	"MC_FORCE_SHM":                            hintNone,
	"MC_USE_RDMA_TWOSIDED":                    hintRDMA,
	"MC_CONTEXT_PAUSE_TTL_MS":                 hintRDMA,
	"MC_RPC_CLIENT_IO_THREADS":                hintNone,
	"MC_TE_RPC_CLIENT_IO_THREADS":             hintNone,
	"MC_TENT_CONF":                            hintNone,
	"MC_TENT_RPC_THREADS":                     hintNone,
	"MC_TE_FILTERS_EXCLUDE":                   hintNone,
	"MC_TPU_PJRT_LIB":                         hintNone,
	"MC_YLT_LOG_LEVEL":                        hintNone,
}

// mooncakeLogLevel sets log_level from MC_LOG_LEVEL. Mooncake ignores a
// value it does not know; so does kvconnect, with a warning.
func (ld *loader) mooncakeLogLevel(l *layer, ce CompatEnv, v string) {
	level, ok := mooncakeLogLevels[strings.ToUpper(strings.TrimSpace(v))]
	if !ok {
		ld.problem(&Problem{Key: ce.Name, Value: v, Source: "env " + ce.Name, Warning: true,
			Reason: "not a Mooncake log level; ignored, as Mooncake ignores it", Allowed: "TRACE, INFO, WARNING or ERROR"})
		return
	}
	l.set(ce.Key, entry{value: level, source: "env " + ce.Name, text: true})
}

// mooncakeUnreadEnv warns about each Mooncake Transfer Engine variable set
// in the environment that kvconnect does not read, except those the caller
// reads itself (Options.CallerEnv).
func (ld *loader) mooncakeUnreadEnv() {
	caller := map[string]bool{}
	for _, name := range ld.opts.CallerEnv {
		caller[name] = true
	}
	var names []string
	for name := range ld.env {
		if _, ok := mooncakeUnread[name]; ok && !caller[name] {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	for _, name := range names {
		v := ld.env[name]
		reason := "a Mooncake Transfer Engine variable kvconnect does not read; ignored"
		if hint := mooncakeUnread[name]; hint != "" {
			reason += ": " + hint
		}
		ld.problem(&Problem{Key: name, Value: v, Source: "env " + name, Warning: true, Reason: reason})
	}
}
