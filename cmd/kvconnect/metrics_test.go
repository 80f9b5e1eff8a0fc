package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kvconnect/kvconnect/cmd/kvconnect/internal/bench"
	"github.com/kvconnect/kvconnect/internal/testbin"
	"github.com/kvconnect/kvconnect/metrics/metricstest"
)

// serveStatus is what serve's status line says that these tests read.
type serveStatus struct {
	Session        string `json:"session"`
	MetricsAddress string `json:"metrics_address"`
	PluginPID      int    `json:"plugin_pid"`
	Healthy        bool   `json:"healthy"`
}

// startServeWithStatus runs kvconnect serve in a process group of its own
// and returns its status line and the process.
func startServeWithStatus(t *testing.T, args ...string) (serveStatus, *exec.Cmd, *syncBuffer) {
	t.Helper()
	cmd := exec.Command(kvconnectBin(t), append([]string{"serve", "--log-level", "info", "--log-format", "json"}, args...)...)
	cmd.Env = append(os.Environ(), "KVCONNECT_PLUGIN_DIR=")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var out, errOut syncBuffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); cmd.Wait() })
	deadline := time.Now().Add(30 * time.Second)
	for {
		var st serveStatus
		if line, _, ok := strings.Cut(out.String(), "\n"); ok && json.Unmarshal([]byte(line), &st) == nil && st.Session != "" {
			return st, cmd, &errOut
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve printed no status within 30 s:\n%s\n%s", out.String(), errOut.String())
		}
		time.Sleep(10 * time.Millisecond) // waiting for its status line
	}
}

func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestServeMetrics is the acceptance run: kvconnect serve
// --metrics-address 127.0.0.1:0 names the address it bound in its status
// line and serves /metrics, /healthz, /readyz and /status; after verified
// kvconnect bench runs against it from a node with metrics of its own,
// the initiated bytes (the bench node's endpoint) and the served bytes
// (serve's endpoint) equal the bytes the bench reports it moved; /healthz
// goes 503 when serve's plugin is killed and 200 after its restart; and
// the endpoint goes away when serve exits.
func TestServeMetrics(t *testing.T) {
	plugins := pluginDir(t)
	tcpBin, err := testbin.Build("./cmd/kvconnect-transport-tcp", "kvconnect-transport-tcp")
	if err != nil {
		t.Fatal(err)
	}
	gated := t.TempDir()
	_, open, closeGate, err := testbin.Gated(gated, "kvconnect-transport-tcp", tcpBin)
	if err != nil {
		t.Fatal(err)
	}
	defer open()
	st, cmd, stderr := startServeWithStatus(t, "--metrics-address", "127.0.0.1:0", "--alloc", "4MiB", "--plugin-dir", gated, "--plugin-start-timeout", "1m")
	if host, port, err := net.SplitHostPort(st.MetricsAddress); err != nil || host != "127.0.0.1" || port == "0" {
		t.Fatalf("status line metrics_address %q: want 127.0.0.1 and the port it bound", st.MetricsAddress)
	}
	base := "http://" + st.MetricsAddress
	if code, body := httpGet(t, base+"/healthz"); code != http.StatusOK {
		t.Fatalf("/healthz: %d %q", code, body)
	}
	if code, body := httpGet(t, base+"/readyz"); code != http.StatusOK {
		t.Fatalf("/readyz: %d %q", code, body)
	}
	code, body := httpGet(t, base+"/status")
	var status serveStatus
	if code != http.StatusOK || json.Unmarshal([]byte(body), &status) != nil || status.Session != st.Session || status.MetricsAddress != st.MetricsAddress {
		t.Fatalf("/status: %d %s", code, body)
	}

	// Two verified runs, a WRITE and a READ, from a bench node whose own
	// endpoint counts what it initiated.
	run := func(op string) bench.Result {
		t.Helper()
		r, err := benchJSON(t, "--mode", "initiator", "--segment-id", st.Session, "--operation", op, "--verify",
			"--metrics-address", "127.0.0.1:0", "--plugin-dir", plugins,
			"--block-size", "64KiB", "--batch-size", "4", "--threads", "2", "--duration", "300ms", "--buffer-size", "4MiB")
		if err != nil {
			t.Fatalf("bench %s: %v", op, err)
		}
		if r.Verify == nil || !r.Verify.OK || r.Bytes == 0 || r.WarmupBytes != 0 {
			t.Fatalf("bench %s: %+v, verify %+v", op, r, r.Verify)
		}
		if r.Metrics == nil {
			t.Fatalf("bench %s with metrics_address reported no metrics", op)
		}
		t.Logf("bench %s moved %d bytes, verification read %d and wrote %d; its endpoint: %s", op, r.Bytes, r.Verify.ReadBytes, r.Verify.WriteBytes, r.Metrics.Summary())
		return r
	}
	w, r := run("write"), run("read")
	initiated := func(m *bench.NodeMetrics, op string) float64 {
		return m.Value("kvconnect_initiated_bytes_total", "op", op, "result", "completed")
	}
	// Each bench node is new: its counters are its own run's.
	if got, want := initiated(w.Metrics, "write"), float64(w.Bytes+w.Verify.WriteBytes); got != want {
		t.Errorf("write run: initiated WRITE bytes %v, the bench moved %v", got, want)
	}
	if got, want := initiated(w.Metrics, "read"), float64(w.Verify.ReadBytes); got != want {
		t.Errorf("write run: initiated READ bytes %v, verification read %v", got, want)
	}
	if got, want := initiated(r.Metrics, "read"), float64(r.Bytes+r.Verify.ReadBytes); got != want {
		t.Errorf("read run: initiated READ bytes %v, the bench moved %v", got, want)
	}
	if got, want := initiated(r.Metrics, "write"), float64(r.Verify.WriteBytes); got != want {
		t.Errorf("read run: initiated WRITE bytes %v, verification wrote %v", got, want)
	}
	// serve counted both runs as served, in its plugin.
	f, err := metricstest.Scrape(context.Background(), base+"/metrics")
	if err != nil {
		t.Fatal(err)
	}
	served := func(op string) float64 {
		return f.Value("kvconnect_served_bytes_total", "transport", "tcp", "op", op, "result", "completed")
	}
	if got, want := served("write"), float64(w.Bytes+w.Verify.WriteBytes+r.Verify.WriteBytes); got != want {
		t.Errorf("served WRITE bytes %v, the benches wrote %v\n%s", got, want, f.Dump("kvconnect_served"))
	}
	if got, want := served("read"), float64(w.Verify.ReadBytes+r.Bytes+r.Verify.ReadBytes); got != want {
		t.Errorf("served READ bytes %v, the benches read %v\n%s", got, want, f.Dump("kvconnect_served"))
	}

	// The plugin dies: /healthz answers 503 while it is down (its restart
	// held at launch), 200 once it is back.
	if err := closeGate(); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(st.PluginPID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	testbin.Eventually(t, "/healthz to answer 503 after the plugin was killed", func() bool {
		code, _ := httpGet(t, base+"/healthz")
		return code == http.StatusServiceUnavailable
	})
	code, body = httpGet(t, base+"/healthz")
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "plugin process") {
		t.Errorf("/healthz while the plugin is down: %d %q", code, body)
	}
	if err := open(); err != nil {
		t.Fatal(err)
	}
	testbin.Eventually(t, "/healthz to answer 200 after the restart", func() bool {
		code, _ := httpGet(t, base+"/healthz")
		return code == http.StatusOK
	})
	f, err = metricstest.Scrape(context.Background(), base+"/metrics")
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]float64{"kvconnect_plugin_crashes_total": 1, "kvconnect_plugin_restarts_total": 1, "kvconnect_plugin_up": 1} {
		if got := f.Value(name, "transport", "tcp"); got != want {
			t.Errorf("%s = %v after one crash and restart, want %v", name, got, want)
		}
	}
	if got := served("write"); got != float64(w.Bytes+w.Verify.WriteBytes+r.Verify.WriteBytes) {
		t.Errorf("served WRITE bytes %v after the restart: counts went back", got)
	}

	// serve exits on SIGTERM and its endpoint goes with it.
	if err := syscall.Kill(cmd.Process.Pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("serve exited with %v:\n%s", err, stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not exit within 30 s of SIGTERM")
	}
	if nc, err := net.Dial("tcp", st.MetricsAddress); err == nil {
		nc.Close()
		t.Errorf("the metrics endpoint still accepts connections after serve exited")
	}
}

// TestServeMetricsPortTaken: a metrics_address whose port is taken ends
// serve at once with exit status 1 and an error naming the port.
func TestServeMetricsPortTaken(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	port := strconv.Itoa(taken.Addr().(*net.TCPAddr).Port)
	code, out, took := runServe(t, "--metrics-address", "127.0.0.1:"+port)
	if code != 1 || !strings.Contains(out, "port "+port) || !strings.Contains(out, "metrics_address") || !strings.Contains(out, "address in use") {
		t.Fatalf("serve with metrics_address on a taken port: exit %d after %v:\n%s", code, took, out)
	}
}

// TestDoctorMetricsAddress: doctor says whether metrics_address can be
// bound, and a taken port is an error (exit 1) naming it.
func TestDoctorMetricsAddress(t *testing.T) {
	t.Setenv("KVCONNECT_PLUGIN_DIR", "")
	out, err := runCLI(t, "doctor", "--plugin-dir", pluginDir(t), "--metrics-address", "127.0.0.1:0")
	if err != nil || !strings.Contains(out, "metrics_address 127.0.0.1:0: bindable") {
		t.Fatalf("doctor with a free metrics_address: %v\n%s", err, out)
	}
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	addr := taken.Addr().String()
	out, err = runCLI(t, "doctor", "--plugin-dir", pluginDir(t), "--metrics-address", addr)
	var ee exitError
	if !errors.As(err, &ee) || ee.code != 1 || !strings.Contains(out, "metrics_address "+addr+" cannot be bound") {
		t.Fatalf("doctor with a taken metrics_address: %v\n%s", err, out)
	}
}
