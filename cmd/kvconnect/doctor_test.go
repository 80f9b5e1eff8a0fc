package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/kvconnect/kvconnect/internal/shm"
	"github.com/kvconnect/kvconnect/internal/testbin"
)

func TestMain(m *testing.M) {
	testbin.HostSide()
	testbin.Main(m)
}

// pluginDir builds every plugin binary in cmd/ and returns their directory.
func pluginDir(t *testing.T) string { return testbin.PluginDir(t) }

func runCLI(t *testing.T, args ...string) (string, error) {
	t.Helper()
	root := newRootCommand()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs(args)
	err := root.Execute()
	return out.String(), err
}

func TestDoctorJSON(t *testing.T) {
	t.Setenv("KVCONNECT_PLUGIN_DIR", "")
	out, err := runCLI(t, "doctor", "--json", "--protocol", "rdma", "--plugin-dir", pluginDir(t))
	if err != nil {
		t.Fatalf("doctor: %v\n%s", err, out)
	}
	var rep DoctorReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("doctor --json output is not JSON: %v\n%s", err, out)
	}
	if rep.SchemaVersion != 1 || strings.Join(rep.Config.Chain, ",") != "rdma,tcp" {
		t.Fatalf("schema %d chain %v", rep.SchemaVersion, rep.Config.Chain)
	}
	byName := map[string]int{}
	for i, r := range rep.Transports {
		byName[r.Transport] = i
	}
	for _, n := range []string{"rdma", "ucx", "efa", "ascend", "tcp"} {
		if _, ok := byName[n]; !ok {
			t.Errorf("transport %s missing from the report", n)
		}
	}
	tcp := rep.Transports[byName["tcp"]]
	if !tcp.Available || tcp.Plugin == "" || tcp.Version == "" {
		t.Errorf("tcp: %+v, want available with its plugin path and version", tcp)
	}
	rdma := rep.Transports[byName["rdma"]]
	if rdma.Available || rdma.Diagnosis == nil || rdma.Diagnosis.Cause == "" {
		t.Errorf("rdma: %+v, want unavailable with a diagnosis on this machine", rdma)
	}
	if !rep.Decision.OK || rep.Decision.Transport != "tcp" || !strings.Contains(rep.Decision.Reason, "because rdma:") {
		t.Errorf("decision %+v, want tcp because of rdma's cause", rep.Decision)
	}
	if rep.Host.Hostname == "" || len(rep.Host.Addresses) == 0 || !rep.Host.RPCPortOK {
		t.Errorf("host %+v", rep.Host)
	}
	// Shared memory's huge page setting, as the kernel says it, and a
	// warning exactly when regions cannot have huge pages.
	if setting, huge, ok := shm.ShmemHuge(); ok {
		warned := false
		for _, w := range rep.Host.Warnings {
			warned = warned || strings.Contains(w, shm.ShmemHugeFile)
		}
		if rep.Host.ShmemHuge != setting || warned == huge {
			t.Errorf("shmem_huge_pages %q (kernel: %q), warned %v, want a warning only when regions get no huge pages: %q", rep.Host.ShmemHuge, setting, warned, rep.Host.Warnings)
		}
	}
}

func TestDoctorTableAndExitStatus(t *testing.T) {
	t.Setenv("KVCONNECT_PLUGIN_DIR", "")
	out, err := runCLI(t, "doctor", "--plugin-dir", pluginDir(t))
	if err != nil {
		t.Fatalf("doctor: %v", err)
	}
	for _, want := range []string{"TRANSPORT", "tcp", "available", "decision: with this config kvconnect would use tcp"} {
		if !strings.Contains(out, want) {
			t.Errorf("table output lacks %q:\n%s", want, out)
		}
	}
	// No tcp plugin anywhere: the chain cannot start; exit status 1.
	empty := t.TempDir()
	t.Setenv("PATH", empty)
	out, err = runCLI(t, "doctor", "--protocol", "nosuch", "--plugin-dir", empty)
	var ee exitError
	if !errors.As(err, &ee) || ee.code != 1 {
		t.Fatalf("doctor with no usable transport: err %v, want exit status 1\n%s", err, out)
	}
	if !strings.Contains(out, "no transport would start") {
		t.Errorf("output lacks the failed decision:\n%s", out)
	}
}
