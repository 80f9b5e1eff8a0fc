package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/kvconnect/kvconnect/internal/testbin"
	"github.com/kvconnect/kvconnect/internal/testservers"
	"github.com/kvconnect/kvconnect/metadata"
)

// TestServeFailsFastOnUnreachableMetadata: an etcd nobody answers on ends
// serve within connect_timeout (+0.5 s) with exit 1, naming it; Mooncake's
// variable and bare host:port spelling too.
func TestServeFailsFastOnUnreachableMetadata(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  []string
		args []string
	}{
		{"flag", nil, []string{"--metadata", "etcd://127.0.0.1:1", "--connect-timeout", "3s"}},
		{"MOONCAKE_TE_META_DATA_SERVER", []string{"MOONCAKE_TE_META_DATA_SERVER=127.0.0.1:1"}, []string{"--connect-timeout", "3s"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, took := runServeEnv(t, tc.env, tc.args...)
			t.Logf("exit %d after %v: %s", code, took, strings.TrimSpace(out))
			if code != 1 || !strings.Contains(out, "127.0.0.1:1") {
				t.Fatalf("exit %d, output does not name 127.0.0.1:1", code)
			}
			// Within connect_timeout, not retrying on: the bound only
			// leaves a loaded machine room (10 s) beyond the 3 s.
			if took > 3*time.Second+10*time.Second {
				t.Errorf("serve took %v to fail; connect_timeout is 3s", took)
			}
		})
	}
}

// metadataServer runs `kvconnect metadata-server` and returns its URL.
func metadataServer(t *testing.T) string {
	t.Helper()
	cmd := exec.Command(kvconnectBin(t), "metadata-server", "--listen", "127.0.0.1:0")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	var info struct{ URL string }
	if err := json.Unmarshal([]byte(line), &info); err != nil || info.URL == "" {
		t.Fatalf("metadata-server printed %q", line)
	}
	return info.URL
}

// TestBenchThroughMetadataServices: a serve node and a bench initiator
// find each other through etcd, Redis and kvconnect's HTTP metadata
// server, and bench --verify passes; after kill -9 of the serve node its
// keys are gone within the TTL.
func TestBenchThroughMetadataServices(t *testing.T) {
	e := testservers.StartEtcd(t, testservers.EtcdOptions{})
	r := testservers.StartRedis(t, testservers.RedisOptions{})
	httpURL := metadataServer(t)
	for _, tc := range []struct {
		name, url string
		has       func(key string) bool
	}{
		{"etcd", e.URL(), func(key string) bool {
			resp, err := e.Client(t).Get(context.Background(), key)
			return err == nil && len(resp.Kvs) > 0
		}},
		{"redis", r.URL(), func(key string) bool {
			n, err := r.Client(t).Exists(context.Background(), key).Result()
			return err == nil && n > 0
		}},
		{"http", httpURL, func(key string) bool {
			resp, err := http.Get(httpURL + "?key=" + metadata.EscapeKey(key))
			if err != nil {
				return false
			}
			resp.Body.Close()
			return resp.StatusCode == http.StatusOK
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// A TTL three renewals long, so a loaded machine delaying one
			// does not expire the key while the node serves.
			session, cmd, _ := startServe(t, "--metadata", tc.url, "--metadata-ttl", "3s", "--alloc", "16MiB")
			key := metadata.NewKeys("").Segment(session)
			if !tc.has(key) {
				t.Fatalf("no key %s after serve started", key)
			}
			res, err := benchJSON(t, "--metadata", tc.url, "--mode", "initiator", "--segment-id", session, "--operation", "write", "--verify",
				"--plugin-dir", benchPluginDir(t), "--block-size", "64KiB", "--batch-size", "16", "--threads", "2",
				"--duration", "300ms", "--buffer-size", "8MiB")
			if err != nil || res.Verify == nil || !res.Verify.OK || res.Verify.Checked == 0 {
				t.Fatalf("bench through %s: %v, verify %+v", tc.name, err, res.Verify)
			}
			cmd.Process.Signal(syscall.SIGKILL)
			cmd.Wait()
			took := testbin.Eventually(t, "the killed node's key "+key+" to expire (TTL 3s)", func() bool { return !tc.has(key) })
			t.Logf("%s: key gone %v after kill -9 (TTL 3s)", tc.name, took)
		})
	}
}

// runServeEnv is runServe with extra environment.
func runServeEnv(t *testing.T, env []string, args ...string) (int, string, time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, kvconnectBin(t), append([]string{"serve", "--log-level", "warn"}, args...)...)
	cmd.Env = append(append(os.Environ(), "KVCONNECT_PLUGIN_DIR="), env...)
	start := time.Now()
	out, err := cmd.CombinedOutput()
	took := time.Since(start)
	if ctx.Err() != nil {
		t.Fatalf("kvconnect serve %v did not exit within 30 s (it hangs):\n%s", args, out)
	}
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatal(err)
	}
	return cmd.ProcessState.ExitCode(), string(out), took
}

// TestDoctorChecksMetadata: doctor writes, reads back and deletes a probe
// key with their round-trip times; a service that does not answer, or
// refuses the password, is an error (exit 1) naming it.
func TestDoctorChecksMetadata(t *testing.T) {
	t.Setenv("KVCONNECT_PLUGIN_DIR", "")
	e := testservers.StartEtcd(t, testservers.EtcdOptions{})
	out, err := runCLI(t, "doctor", "--metadata", e.URL(), "--plugin-dir", pluginDir(t))
	if err != nil {
		t.Fatalf("doctor: %v\n%s", err, out)
	}
	for _, want := range []string{"metadata: " + e.URL(), "connect: ok", "write a probe key (mooncake/ram/kvconnect-doctor-", "read it back: ok", "delete it: ok"} {
		if !strings.Contains(out, want) {
			t.Errorf("doctor output does not say %q:\n%s", want, out)
		}
	}
	resp, err := e.Client(t).Get(context.Background(), "mooncake/", clientv3.WithPrefix())
	if err != nil || len(resp.Kvs) != 0 {
		t.Errorf("doctor left keys behind: %v %v", resp, err)
	}

	r := testservers.StartRedis(t, testservers.RedisOptions{Password: "right"})
	for _, tc := range []struct{ name, url, says string }{
		{"unreachable", "etcd://127.0.0.1:1", "127.0.0.1:1"},
		{"wrong password", strings.Replace(r.URL(), "redis://", "redis://:wrong@", 1), "unauthenticated"},
	} {
		out, err := runCLI(t, "doctor", "--metadata", tc.url, "--connect-timeout", "2s", "--plugin-dir", pluginDir(t))
		var ee exitError
		if !errors.As(err, &ee) || ee.code != 1 || !strings.Contains(out, "connect: FAILED") || !strings.Contains(out, tc.says) {
			t.Errorf("doctor with %s metadata: %v\n%s", tc.name, err, out)
		}
	}
}
