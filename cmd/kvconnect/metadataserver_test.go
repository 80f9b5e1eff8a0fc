package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kvconnect/kvconnect/errdefs"
	"github.com/kvconnect/kvconnect/internal/testbin"
	"github.com/kvconnect/kvconnect/metadata"
)

// TestMetadataServerCommand runs `kvconnect metadata-server` as a process:
// it prints its address, two nodes find each other through it by segment
// name, a dead node's entries expire, and SIGTERM stops it with exit 0.
func TestMetadataServerCommand(t *testing.T) {
	bin, err := testbin.Build("./cmd/kvconnect", "kvconnect")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "metadata-server", "--listen", "127.0.0.1:0", "--ttl", "30s")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cmd.Process.Kill()
		cmd.Wait()
	}()
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("no address line: %v\n%s", err, stderr.String())
	}
	var info struct{ Address, URL, Path, TTL string }
	if err := json.Unmarshal([]byte(line), &info); err != nil || info.Address == "" || info.Path != "/metadata" || info.TTL != "30s" {
		t.Fatalf("address line %q: %+v, %v", line, info, err)
	}
	url := "http://" + info.Address + info.Path
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// A TTL no stall outlasts: the entry goes when a closes, not by expiry.
	a, err := metadata.Open(ctx, metadata.Options{URL: url, TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	desc := []byte(`{"name":"10.0.0.1:15001","protocol":"tcp","buffers":[]}`)
	if err := a.Publish(ctx, "10.0.0.1:15001", desc, metadata.RPCLocation{Host: "10.0.0.1", Port: 15001}); err != nil {
		t.Fatal(err)
	}
	b, err := metadata.Open(ctx, metadata.Options{URL: url, RefreshInterval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close(ctx)
	got, err := b.Resolve(ctx, "10.0.0.1:15001")
	if err != nil || string(got) != string(desc) {
		t.Fatalf("Resolve = %s, %v", got, err)
	}
	gone := b.Gone("10.0.0.1:15001")
	if err := a.Close(ctx); err != nil {
		t.Fatal(err)
	}
	testbin.WaitClosed(t, gone, "Gone after the node closed")
	if _, err := b.Resolve(ctx, "10.0.0.1:15001"); !errors.Is(err, errdefs.ErrUnknownPeer) {
		t.Errorf("after Close: %v", err)
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("exit after SIGTERM: %v\n%s", err, stderr.String())
		}
	case <-time.After(testbin.WaitLimit):
		t.Fatal("metadata-server did not stop on SIGTERM")
	}
	if !strings.Contains(stderr.String(), "metadata server stopped") {
		t.Errorf("log:\n%s", stderr.String())
	}
}

// TestMetadataServerPortInUse: a port it cannot listen on is exit 1
// naming the port.
func TestMetadataServerPortInUse(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	out, err := runConfigCLI(t, nil, "metadata-server", "--listen", ln.Addr().String())
	if err == nil || !strings.Contains(err.Error(), "port "+port) || !strings.Contains(err.Error(), "address already in use") {
		t.Errorf("metadata-server on a taken port: %v\n%s", err, out)
	}
	for _, args := range [][]string{{"--ttl", "-1s"}, {"--max-body", "0"}, {"--path", "metadata"}} {
		if _, err := runConfigCLI(t, nil, append([]string{"metadata-server", "--listen", "127.0.0.1:0"}, args...)...); err == nil {
			t.Errorf("%v accepted", args)
		}
	}
}

// TestMetadataServerIgnoresNodeSettings: the metadata server uses the log
// settings only; a node's setting that does not load (the environment
// may hold one meant for a node) does not stop it, a bad log setting
// does.
func TestMetadataServerIgnoresNodeSettings(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	// A taken port: the command fails at once, after loading its settings.
	_, err = runConfigCLI(t, []string{"KVCONNECT_RPC_PORT=abc"}, "metadata-server", "--listen", ln.Addr().String())
	if err == nil || !strings.Contains(err.Error(), "address already in use") {
		t.Errorf("metadata-server with KVCONNECT_RPC_PORT=abc: %v, want it to get as far as its port", err)
	}
	_, err = runConfigCLI(t, []string{"KVCONNECT_LOG_LEVEL=loud"}, "metadata-server", "--listen", ln.Addr().String())
	if err == nil || !strings.Contains(err.Error(), "log_level") {
		t.Errorf("metadata-server with KVCONNECT_LOG_LEVEL=loud: %v, want an error naming log_level", err)
	}
}
