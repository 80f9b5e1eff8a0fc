package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/kvconnect/kvconnect/connector"
	"github.com/kvconnect/kvconnect/internal/shm"
	"github.com/kvconnect/kvconnect/internal/version"
	"github.com/kvconnect/kvconnect/transports"
	"github.com/kvconnect/kvconnect/units"
)

func init() { subcommands = append(subcommands, newDoctorCommand) }

// DoctorReport is the stable schema of `kvconnect doctor --json`
// (schema_version 1; fields are only ever added).
type DoctorReport struct {
	SchemaVersion int                     `json:"schema_version"`
	Version       string                  `json:"kvconnect_version"`
	Config        DoctorConfig            `json:"config"`
	Transports    []connector.ProbeResult `json:"transports"`
	Host          DoctorHost              `json:"host"`
	Metadata      *DoctorMetadata         `json:"metadata,omitempty"` // nil in P2P mode
	Decision      DoctorDecision          `json:"decision"`
}

// DoctorConfig is the part of the config that decides the transport.
type DoctorConfig struct {
	Protocol   string   `json:"protocol"`
	Fallback   []string `json:"fallback"`
	Strict     bool     `json:"strict"`
	Chain      []string `json:"chain"`
	DeviceName string   `json:"device_name"`
	PluginDir  string   `json:"plugin_dir,omitempty"`
}

// DoctorHost is what doctor learned about the host around the transports.
type DoctorHost struct {
	Hostname   string   `json:"hostname"`
	Addresses  []string `json:"addresses"`  // what hostname resolves to
	Interfaces []string `json:"interfaces"` // local interfaces holding those addresses
	RPCPort    int      `json:"rpc_port"`
	RPCPortOK  bool     `json:"rpc_port_bindable"`
	RPCPortErr string   `json:"rpc_port_error,omitempty"`
	// MetricsAddress is where the metrics endpoint would listen
	// (metrics_address on bind_address), "" when it is off.
	MetricsAddress string `json:"metrics_address,omitempty"`
	MetricsOK      bool   `json:"metrics_address_bindable,omitempty"`
	MetricsErr     string `json:"metrics_address_error,omitempty"`
	ShmTotal       uint64 `json:"dev_shm_total_bytes"`
	ShmFree        uint64 `json:"dev_shm_free_bytes"`
	// ShmemHuge is shared memory's transparent huge page setting
	// (shm.ShmemHugeFile); empty where the kernel has none.
	ShmemHuge  string `json:"shmem_huge_pages,omitempty"`
	MemlockCur uint64 `json:"memlock_soft_bytes"` // ^uint64(0) = unlimited
	MemlockMax uint64 `json:"memlock_hard_bytes"`
	CapIPCLock bool   `json:"cap_ipc_lock"` // the kernel ignores the memlock limit then
	// Auth says whether peers must authenticate, and with which key (never
	// a secret).
	Auth string `json:"auth"`
	// HostnameFrom says how the hostname was chosen when it was not set.
	HostnameFrom string   `json:"hostname_from,omitempty"`
	Warnings     []string `json:"warnings"`
	// Errors are what would stop a node from starting here.
	Errors []string `json:"errors"`
}

// DoctorDecision says which transport this config would end up on.
type DoctorDecision struct {
	OK        bool   `json:"ok"`
	Transport string `json:"transport,omitempty"`
	Reason    string `json:"reason"`
}

func newDoctorCommand() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "doctor",
		Short: "Probe every transport and the host; say which transport this config would use and why",
		Long: `doctor starts every known transport through its plugin (and any other
transport the config names), the way a node would, records whether it comes
up and, when it does not, the diagnosis: the step that failed, the native
code, the cause and what to do. It also checks the host: the address peers
would use, the RPC port, /dev/shm and the memlock limit. It ends with the
decision. Exit status 0 when the configured chain yields a working
transport, 1 otherwise.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			loaded, _, err := loadConfig(cmd)
			if err != nil {
				return err
			}
			rep := runDoctor(cmd, loaded.Config)
			if asJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				if err := enc.Encode(rep); err != nil {
					return err
				}
			} else {
				printDoctor(cmd.OutOrStdout(), rep)
			}
			if !rep.Decision.OK {
				return exitError{code: 1}
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the report as JSON (schema_version 1)")
	return cmd
}

func runDoctor(cmd *cobra.Command, cfg connector.Config) DoctorReport {
	ctx := cmd.Context()
	catalog := transports.Builtin()
	chain := catalog.Chain(cfg.WithDefaults().Protocol, cfg.Fallback)
	rep := DoctorReport{SchemaVersion: 1, Version: version.Version,
		Config: DoctorConfig{Protocol: cfg.WithDefaults().Protocol, Fallback: cfg.Fallback, Strict: cfg.Fallback != nil && len(cfg.Fallback) == 0,
			Chain: chain, DeviceName: cfg.DeviceName, PluginDir: cfg.PluginDir}}
	names := catalog.Names()
	for _, n := range chain {
		if !contains(names, n) {
			names = append(names, n)
		}
	}
	results := map[string]connector.ProbeResult{}
	for _, n := range names {
		r := connector.ProbeTransport(ctx, cfg, n)
		results[n] = r
		rep.Transports = append(rep.Transports, r)
	}
	rep.Host = probeHost(cfg.WithDefaults())
	if rep.Metadata = probeMetadata(ctx, cfg); rep.Metadata != nil && !rep.Metadata.OK {
		rep.Host.Errors = append(rep.Host.Errors, rep.Metadata.Error)
	}

	var failed []string
	for _, n := range chain {
		r := results[n]
		if r.Available {
			rep.Decision = DoctorDecision{OK: true, Transport: n}
			if len(failed) == 0 {
				rep.Decision.Reason = fmt.Sprintf("with this config kvconnect would use %s, the configured protocol", n)
			} else {
				rep.Decision.Reason = fmt.Sprintf("with this config kvconnect would use %s, because %s", n, strings.Join(failed, "; "))
			}
			if len(rep.Host.Errors) > 0 {
				rep.Decision = DoctorDecision{Transport: n, Reason: fmt.Sprintf("%s would come up, but a node would not start here: %s",
					n, strings.Join(rep.Host.Errors, "; "))}
			}
			return rep
		}
		failed = append(failed, n+": "+causeOf(r))
	}
	rep.Decision = DoctorDecision{Reason: "with this config no transport would start: " + strings.Join(failed, "; ")}
	if rep.Config.Strict {
		rep.Decision.Reason += " (fallback is disabled: fallback: [])"
	}
	return rep
}

func causeOf(r connector.ProbeResult) string {
	if r.Diagnosis == nil {
		return "unknown"
	}
	s := r.Diagnosis.Cause
	if r.Diagnosis.Step != "" {
		s = r.Diagnosis.Step + " failed: " + s
	}
	if r.Diagnosis.NativeName != "" {
		s += " (" + r.Diagnosis.NativeName + ")"
	}
	return s
}

// containerBridges are interface name prefixes that peers on other hosts
// usually cannot reach.
var containerBridges = []string{"docker", "br-", "veth", "virbr", "cni", "flannel", "cali", "podman"}

func probeHost(cfg connector.Config) DoctorHost {
	h := DoctorHost{Hostname: cfg.Hostname, RPCPort: cfg.RPCPort, Warnings: []string{}, Errors: []string{}, Addresses: []string{}, Interfaces: []string{}}
	if h.Hostname == "" {
		h.Hostname, h.HostnameFrom = connector.OutwardAddress()
	}
	if k, err := cfg.Keyring(); err != nil {
		h.Auth = "error"
		h.Errors = append(h.Errors, err.Error())
	} else {
		h.Auth = k.String()
	}
	addrs, err := net.LookupHost(h.Hostname)
	if err != nil {
		h.Errors = append(h.Errors, fmt.Sprintf("hostname %q does not resolve (%v): a node would not start (peers could not reach it); set hostname to this host's IP, or leave it empty for the outward address", h.Hostname, err))
	}
	h.Addresses = append(h.Addresses, addrs...)
	ifaces, _ := net.Interfaces()
	for _, a := range addrs {
		ip := net.ParseIP(a)
		if ip == nil {
			continue
		}
		if ip.IsLoopback() {
			h.Warnings = append(h.Warnings, fmt.Sprintf("hostname %s is a loopback address: only peers on this host can reach it; set hostname (or kv_ip) to an address of a NIC peers can reach", a))
		}
		for _, ifc := range ifaces {
			ias, _ := ifc.Addrs()
			for _, ia := range ias {
				if n, ok := ia.(*net.IPNet); ok && n.IP.Equal(ip) {
					h.Interfaces = append(h.Interfaces, ifc.Name)
					for _, p := range containerBridges {
						if strings.HasPrefix(ifc.Name, p) {
							h.Warnings = append(h.Warnings, fmt.Sprintf("hostname %s is on %s, a container bridge: peers on other hosts usually cannot reach it", a, ifc.Name))
						}
					}
				}
			}
		}
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(cfg.BindAddress, strconv.Itoa(cfg.RPCPort)))
	if err != nil {
		h.RPCPortErr = err.Error()
		h.Errors = append(h.Errors, fmt.Sprintf("rpc_port %d cannot be bound: %v: a node would not start", cfg.RPCPort, err))
	} else {
		h.RPCPortOK = true
		ln.Close()
	}
	if addr, err := cfg.MetricsListenAddress(); err == nil && addr != "" {
		h.MetricsAddress = addr
		if ln, err := net.Listen("tcp", addr); err != nil {
			h.MetricsErr = err.Error()
			h.Errors = append(h.Errors, fmt.Sprintf("metrics_address %s cannot be bound: %v: a node would not start", addr, err))
		} else {
			h.MetricsOK = true
			ln.Close()
		}
	}
	var st unix.Statfs_t
	if err := unix.Statfs("/dev/shm", &st); err == nil {
		h.ShmTotal, h.ShmFree = st.Blocks*uint64(st.Bsize), st.Bavail*uint64(st.Bsize)
	} else {
		h.Warnings = append(h.Warnings, "/dev/shm is not mounted; kvconnect uses memfd regions, which do not need it, but other tools may")
	}
	if setting, huge, ok := shm.ShmemHuge(); ok {
		h.ShmemHuge = setting
		if !huge {
			h.Warnings = append(h.Warnings, fmt.Sprintf("%s is %q: regions get 4 KiB pages, and on a VM a data path walking hundreds of MiB of them can cost more than the transfer (a 4 KiB op between two processes: 50 µs instead of 35 through a plugin, 37 instead of 23 in-process, on one); echo advise > %s gives regions, which ask for them, 2 MiB pages", shm.ShmemHugeFile, setting, shm.ShmemHugeFile))
		}
	}
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_MEMLOCK, &rl); err == nil {
		h.MemlockCur, h.MemlockMax = rl.Cur, rl.Max
		h.CapIPCLock = hasCapIPCLock()
		if rl.Cur != unix.RLIM_INFINITY && rl.Cur < 64<<20 && !h.CapIPCLock {
			h.Warnings = append(h.Warnings, fmt.Sprintf("memlock limit is %s: RDMA and EFA memory registration need more (ulimit -l unlimited; docker --ulimit memlock=-1)", units.HumanSize(rl.Cur)))
		}
	}
	return h
}

func printDoctor(w io.Writer, rep DoctorReport) {
	fmt.Fprintf(w, "kvconnect doctor (kvconnect %s)\n\n", rep.Version)
	fmt.Fprintf(w, "config: protocol=%s chain=%s", rep.Config.Protocol, strings.Join(rep.Config.Chain, " -> "))
	if rep.Config.Strict {
		fmt.Fprint(w, " (strict: no fallback)")
	}
	if rep.Config.DeviceName != "" {
		fmt.Fprintf(w, " device_name=%s", rep.Config.DeviceName)
	}
	fmt.Fprint(w, "\n\n")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TRANSPORT\tSTATUS\tPLUGIN\tDETAIL")
	for _, r := range rep.Transports {
		status, detail := "available", r.Summary
		if !r.Available {
			status, detail = "unavailable", causeOf(r)
		}
		plugin := r.Plugin
		if plugin == "" {
			plugin = "(not found)"
		} else if r.Version != "" {
			plugin += " v" + r.Version
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", r.Transport, status, plugin, shorten(firstLine(detail), 100))
	}
	tw.Flush()
	for _, r := range rep.Transports {
		if r.Available || r.Diagnosis == nil {
			continue
		}
		fmt.Fprintf(w, "\n%s: %s\n", r.Transport, causeOf(r))
		for _, hint := range r.Diagnosis.Hints {
			fmt.Fprintf(w, "  hint: %s\n", hint)
		}
	}
	h := rep.Host
	fmt.Fprintf(w, "\nhost:\n  hostname %s -> %s", h.Hostname, strings.Join(h.Addresses, ", "))
	if len(h.Interfaces) > 0 {
		fmt.Fprintf(w, " (on %s)", strings.Join(h.Interfaces, ", "))
	}
	if h.HostnameFrom != "" {
		fmt.Fprintf(w, "; hostname is not set: %s", h.HostnameFrom)
	}
	fmt.Fprintln(w)
	if h.RPCPortOK {
		fmt.Fprintf(w, "  rpc_port %d: bindable\n", h.RPCPort)
	} else {
		fmt.Fprintf(w, "  rpc_port %d: NOT bindable: %s\n", h.RPCPort, h.RPCPortErr)
	}
	switch {
	case h.MetricsAddress == "":
		fmt.Fprintf(w, "  metrics endpoint: off (metrics_address is empty)\n")
	case h.MetricsOK:
		fmt.Fprintf(w, "  metrics_address %s: bindable\n", h.MetricsAddress)
	default:
		fmt.Fprintf(w, "  metrics_address %s: NOT bindable: %s\n", h.MetricsAddress, h.MetricsErr)
	}
	fmt.Fprintf(w, "  peer authentication: %s\n", h.Auth)
	printMetadata(w, rep.Metadata)
	fmt.Fprintf(w, "  /dev/shm: %s free of %s\n", units.HumanSize(h.ShmFree), units.HumanSize(h.ShmTotal))
	if h.ShmemHuge != "" {
		fmt.Fprintf(w, "  shared memory huge pages (shmem_enabled): %s\n", h.ShmemHuge)
	}
	fmt.Fprintf(w, "  memlock: %s (hard %s)", limit(h.MemlockCur), limit(h.MemlockMax))
	if h.CapIPCLock {
		fmt.Fprint(w, ", but the process has CAP_IPC_LOCK, so the limit does not apply")
	}
	fmt.Fprintln(w)
	for _, e := range h.Errors {
		fmt.Fprintf(w, "  ERROR: %s\n", e)
	}
	for _, warn := range h.Warnings {
		fmt.Fprintf(w, "  warning: %s\n", warn)
	}
	fmt.Fprintf(w, "\ndecision: %s\n", rep.Decision.Reason)
}

func limit(v uint64) string {
	if v == unix.RLIM_INFINITY {
		return "unlimited"
	}
	return units.HumanSize(v)
}

func shorten(s string, n int) string {
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// exitError ends the command with a status code and no further message
// (the command printed its report already).
type exitError struct{ code int }

func (e exitError) Error() string { return "exit status " + strconv.Itoa(e.code) }

// hasCapIPCLock reports whether this process has CAP_IPC_LOCK in its
// effective set (from /proc/self/status), which lifts RLIMIT_MEMLOCK.
func hasCapIPCLock() bool {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "CapEff:"); ok {
			caps, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			const capIPCLock = 14 // linux/capability.h
			return err == nil && caps&(1<<capIPCLock) != 0
		}
	}
	return false
}
