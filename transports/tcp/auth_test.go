package tcp_test

import (
	"bytes"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/kvconnect/kvconnect/auth"
	"github.com/kvconnect/kvconnect/plugins"
	"github.com/kvconnect/kvconnect/plugins/transporttest"
)

// recordingProxy forwards connections to target and records the bytes
// clients sent on them, in order.
func recordingProxy(t *testing.T, target string) (addr string, recorded func() []byte) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var sent bytes.Buffer
	var wg sync.WaitGroup
	var conns []net.Conn
	rec := writerFunc(func(b []byte) (int, error) { mu.Lock(); defer mu.Unlock(); return sent.Write(b) })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", target)
			if err != nil {
				in.Close()
				continue
			}
			mu.Lock()
			conns = append(conns, in, out)
			mu.Unlock()
			wg.Add(2)
			go func() { defer wg.Done(); io.Copy(out, io.TeeReader(in, rec)); out.Close() }()
			go func() { defer wg.Done(); io.Copy(in, out); in.Close() }()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().String(), func() []byte { mu.Lock(); defer mu.Unlock(); return bytes.Clone(sent.Bytes()) }
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(b []byte) (int, error) { return f(b) }

// TestReplayedDataConnectionRefused: the bytes of an authenticated data
// connection that wrote a region, replayed to the data port, do not write
// it again: the replay fails the proof and nothing after it is read.
func TestReplayedDataConnectionRefused(t *testing.T) {
	k, err := auth.NewKeyring("replay-test-secret-0123456789")
	if err != nil {
		t.Fatal(err)
	}
	h := inproc(`{"connections":1}`)
	h.Auth = k
	a := transporttest.NewNode(t, h, "a")
	b := transporttest.NewNode(t, h, "b")
	const size = 256 << 10
	src := a.Alloc(t, size, 0)
	dst := b.Alloc(t, size, 0)
	transporttest.Fill(src.Bytes, 21)

	via, recorded := recordingProxy(t, string(b.Endpoint))
	info := b.Info()
	info.Endpoint = []byte(via)
	peer := a.Connect(t, &transporttest.Node{T: b.T, Name: "b via proxy", Endpoint: info.Endpoint})
	a.MustTransfer(t, peer, []plugins.Op{{Kind: plugins.OpWrite, LocalRegion: src.ID, RemoteRegion: dst.ID, Length: size}})
	if !bytes.Equal(dst.Bytes, src.Bytes) {
		t.Fatal("the authenticated write did not land")
	}
	rec := recorded()
	if len(rec) < auth.HelloSize+auth.ProofSize+size {
		t.Fatalf("recorded %d bytes, want the exchange and the write", len(rec))
	}

	transporttest.Fill(dst.Bytes, 22)
	before := bytes.Clone(dst.Bytes)
	nc, err := net.Dial("tcp", string(b.Endpoint))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(10 * time.Second))
	go nc.Write(rec) // may fail part way: the node closes after the proof
	reply, _ := io.ReadAll(nc)
	if len(reply) != auth.ChallengeSize+auth.VerdictSize || auth.Status(reply[len(reply)-1]) != auth.StatusBadProof {
		t.Fatalf("the replayer got %d bytes, want a challenge and a refusal only", len(reply))
	}
	if !bytes.Equal(dst.Bytes, before) {
		t.Fatal("the replayed write changed the region")
	}
}
