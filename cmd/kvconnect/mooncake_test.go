package main

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
	"time"
)

// TestBenchVerifyAgainstMooncakeTarget: kvconnect bench --mode initiator
// against an unmodified Mooncake transfer_engine_bench target writes,
// reads back and verifies, with nothing asked of the target.
func TestBenchVerifyAgainstMooncakeTarget(t *testing.T) {
	dir := os.Getenv("KVCONNECT_MOONCAKE_BIN")
	if dir == "" {
		t.Skip("set KVCONNECT_MOONCAKE_BIN to the directory holding Mooncake's transfer_engine_bench (e.g. ../shared/mooncake/bin)")
	}
	cmd := exec.Command(filepath.Join(dir, "transfer_engine_bench"), "--mode=target", "--protocol=tcp",
		"--metadata_server=P2PHANDSHAKE", "--local_server_name=127.0.0.1:12345", "--buffer_size=268435456")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	found := make(chan string, 1)
	go func() {
		re := regexp.MustCompile(`listening on ([0-9.]+:[0-9]+)`)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if m := re.FindStringSubmatch(sc.Text()); m != nil {
				found <- m[1]
			}
		}
	}()
	var session string
	select {
	case session = <-found:
	case <-time.After(30 * time.Second):
		t.Fatal("the Mooncake target printed no session")
	}
	waitForBuffers(t, session)
	plugins := benchPluginDir(t)
	for _, op := range []string{"write", "read"} {
		res, err := benchJSON(t, "--mode", "initiator", "--segment-id", session, "--operation", op, "--verify",
			"--plugin-dir", plugins, "--block-size", "64KiB", "--batch-size", "16", "--threads", "2",
			"--duration", "500ms", "--buffer-size", "8MiB")
		if err != nil {
			t.Fatalf("%s against the Mooncake target: %v", op, err)
		}
		if res.Verify == nil || !res.Verify.OK || res.Verify.Checked == 0 || res.Transport != "tcp" {
			t.Fatalf("%s against the Mooncake target: %+v, verify %+v", op, res, res.Verify)
		}
	}
}

// waitForBuffers polls a Mooncake target's handshake until its descriptor
// lists a buffer (it registers memory a moment after it listens).
func waitForBuffers(t *testing.T, session string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if nc, err := net.DialTimeout("tcp", session, time.Second); err == nil {
			req := binary.LittleEndian.AppendUint64(nil, 3)
			req = append(req, 1, '{', '}')
			nc.SetDeadline(time.Now().Add(5 * time.Second))
			nc.Write(req)
			var hdr [9]byte
			if _, err := io.ReadFull(nc, hdr[:]); err == nil {
				body := make([]byte, binary.LittleEndian.Uint64(hdr[:8])-1)
				io.ReadFull(nc, body)
				var d struct{ Buffers []json.RawMessage }
				if json.Unmarshal(body, &d) == nil && len(d.Buffers) > 0 {
					nc.Close()
					return
				}
			}
			nc.Close()
		}
		if time.Now().After(deadline) {
			t.Fatalf("the Mooncake target %s published no buffer within 30 s", session)
		}
		time.Sleep(50 * time.Millisecond) // polling a condition the target shows
	}
}
