package connector_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kvconnect/kvconnect/config"
	"github.com/kvconnect/kvconnect/connector"
	"github.com/kvconnect/kvconnect/internal/testbin"
)

// These tests speak Mooncake's wire by hand, as an unmodified Mooncake
// Transfer Engine (or a hostile peer pretending to be one) would: the
// handshake frames on the RPC port and the TCP data protocol on the tcp
// data port.

// rawFrame sends one handshake frame (as Mooncake frames it) and returns
// the reply's type and body; ok is false when the node closed without one.
func rawFrame(t *testing.T, session string, raw []byte) (typ byte, body []byte, ok bool) {
	t.Helper()
	nc, err := net.DialTimeout("tcp", session, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := nc.Write(raw); err != nil {
		return 0, nil, false
	}
	nc.(*net.TCPConn).CloseWrite() // a truncated frame ends here

	var hdr [9]byte
	if _, err := io.ReadFull(nc, hdr[:]); err != nil {
		return 0, nil, false
	}
	body = make([]byte, binary.LittleEndian.Uint64(hdr[:8])-1)
	if _, err := io.ReadFull(nc, body); err != nil {
		t.Fatalf("reply body: %v", err)
	}
	return hdr[8], body, true
}

func frame(typ byte, body string) []byte {
	b := make([]byte, 9+len(body))
	binary.LittleEndian.PutUint64(b, uint64(1+len(body)))
	b[8] = typ
	copy(b[9:], body)
	return b
}

// mooncakeView fetches a node's descriptor the way a Mooncake initiator
// does: a Metadata frame carrying its own descriptor.
func mooncakeView(t *testing.T, session string) connector.SegmentDescriptor {
	t.Helper()
	own := `{"buffers":[{"addr":140664136269824,"length":67108864,"name":"127.0.0.1:15093"}],"name":"127.0.0.1:15093","protocol":"tcp","tcp_data_port":16383,"tcp_proto_version":2,"timestamp":"2026-12-01 08:49:41.103862"}` + "\n"
	typ, body, ok := rawFrame(t, session, frame(1, own))
	if !ok || typ != 1 {
		t.Fatalf("Metadata: reply type %d (ok %v), want 1, as Mooncake requires", typ, ok)
	}
	var d connector.SegmentDescriptor
	if err := json.Unmarshal(body, &d); err != nil {
		t.Fatalf("descriptor %s: %v", body, err)
	}
	// What Mooncake's decoder needs, as JSON numbers and non-empty names.
	var raw map[string]any
	json.Unmarshal(body, &raw)
	if raw["protocol"] != "tcp" {
		return d // not a Mooncake TCP node: Mooncake refuses it by its protocol
	}
	if _, isNum := raw["tcp_data_port"].(float64); !isNum {
		t.Fatalf("tcp_data_port is not a JSON number: %s", body)
	}
	for i, b := range raw["buffers"].([]any) {
		m := b.(map[string]any)
		_, a := m["addr"].(float64)
		_, l := m["length"].(float64)
		if n, _ := m["name"].(string); n == "" || !a || !l {
			t.Fatalf("buffer %d is not what Mooncake decodes: %v", i, m)
		}
	}
	return d
}

func TestMooncakeHandshake(t *testing.T) {
	c := newNode(t)
	r := alloc(t, c, 1<<20)
	d := mooncakeView(t, c.SessionID())
	if d.Name != c.SessionID() || d.Protocol != "tcp" || d.TCPDataPort == 0 || d.TCPProtoVersion != 2 ||
		len(d.Buffers) != 1 || d.Buffers[0].Addr != r.Addr() || d.Buffers[0].Length != 1<<20 || d.Buffers[0].Name != c.SessionID() {
		t.Fatalf("descriptor for Mooncake: %+v", d)
	}
	// Probe, as SGLang sends it.
	if typ, body, ok := rawFrame(t, c.SessionID(), frame(3, "{}")); !ok || typ != 3 || !strings.Contains(string(body), `"status":"success"`) {
		t.Fatalf("Probe: %d %s %v", typ, body, ok)
	}
	// Notify, as submitTransferWithNotify sends it, reaches Notifications.
	typ, body, ok := rawFrame(t, c.SessionID(), frame(2, `{"name":"agent1","notify_msg":"notification7"}`))
	if !ok || typ != 2 || !strings.Contains(string(body), `"notify_msg":"success"`) {
		t.Fatalf("Notify: %d %s %v", typ, body, ok)
	}
	select {
	case n := <-c.Notifications():
		if n.Name != "agent1" || n.Msg != "notification7" || n.From != "" {
			t.Fatalf("notification %+v", n)
		}
	case <-time.After(testbin.WaitLimit):
		t.Fatal("the Mooncake notify never reached Notifications")
	}
	// An RDMA Mooncake peer's connection handshake is refused with a reason.
	typ, body, ok = rawFrame(t, c.SessionID(), frame(0, `{"local_nic_path":"10.0.0.9:15000@mlx5_0","peer_nic_path":"x@mlx5_0","qp_num":[1,2]}`))
	var cr struct {
		ReplyMsg string `json:"reply_msg"`
	}
	if json.Unmarshal(body, &cr); !ok || typ != 0 || !strings.Contains(cr.ReplyMsg, "TCP") {
		t.Fatalf("Connection: %d %s %v", typ, body, ok)
	}
	// Garbage and oversized frames get no descriptor, and the node keeps
	// answering.
	for name, raw := range map[string][]byte{
		"not json":      frame(1, "not json"),
		"length 0":      make([]byte, 9),
		"oversized":     append(binary.LittleEndian.AppendUint64(nil, 1<<40), 1),
		"unknown type":  frame(9, "{}"),
		"truncated":     frame(1, "{}")[:5],
		"garbage bytes": []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"),
	} {
		if typ, _, ok := rawFrame(t, c.SessionID(), raw); ok && typ != 0xFF {
			t.Errorf("%s: answered with type %d", name, typ)
		}
	}
	mooncakeView(t, c.SessionID())
}

// mcRequest speaks one request of Mooncake's TCP data protocol on nc.
func mcRequest(nc net.Conn, size, addr uint64, op byte, payload []byte) error {
	var h [24]byte
	binary.LittleEndian.PutUint64(h[0:], size)
	binary.LittleEndian.PutUint64(h[8:], addr)
	h[16] = op
	copy(h[17:], "\x20\x20\x31\x30\x30\x0a\x0a") // Mooncake leaves its padding uninitialised
	_, err := nc.Write(append(h[:], payload...))
	return err
}

const statusOK, statusRejected = 0x4D43545600000000, 0x4D43545600000001

// TestMooncakeDataProtocolRefusesBadRequests: every request a Mooncake
// peer (or a hostile one) could send that is not inside a registered
// region is refused, no byte of memory changes, and the node keeps
// serving.
func TestMooncakeDataProtocolRefusesBadRequests(t *testing.T) {
	c := newNode(t)
	guardLow, r, guardHigh := alloc(t, c, 64<<10), alloc(t, c, 64<<10), alloc(t, c, 64<<10)
	for _, m := range []*connector.Region{guardLow, r, guardHigh} {
		for i := range m.Bytes() {
			m.Bytes()[i] = 0x5A
		}
	}
	before := append(append(append([]byte(nil), guardLow.Bytes()...), r.Bytes()...), guardHigh.Bytes()...)
	d := mooncakeView(t, c.SessionID())
	data := net.JoinHostPort("127.0.0.1", strconv.Itoa(d.TCPDataPort))
	base := r.Addr()
	for _, tc := range []struct {
		name       string
		size, addr uint64
		op         byte
	}{
		{"write past the end", 100, base + 64<<10 - 50, 0x81},
		{"write below every region", 16, 4096, 0x81},
		{"write that wraps the address space", 32, ^uint64(0) - 15, 0x81},
		{"write of 1<<62 bytes", 1 << 62, base, 0x81},
		{"write of size 0", 0, base, 0x81},
		{"read past the end", 100, base + 64<<10 - 50, 0x80},
		{"read at address 0", 8, 0, 0x80},
		{"v1 write past the end", 100, base + 64<<10 - 50, 0x01},
		{"v1 read of size 0", 0, base, 0x00},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nc, err := net.DialTimeout("tcp", data, 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			nc.SetDeadline(time.Now().Add(10 * time.Second))
			payload := bytes.Repeat([]byte{0xEE}, int(min(tc.size, 4096)))
			if tc.op&1 == 0 {
				payload = nil
			}
			mcRequest(nc, tc.size, tc.addr, tc.op, payload)
			got, _ := io.ReadAll(nc) // the node closes after a refusal
			if tc.op&0x80 != 0 {
				if len(got) != 8 || binary.LittleEndian.Uint64(got) != statusRejected {
					t.Fatalf("v2: got % x, want only the rejected status", got)
				}
			} else if len(got) != 0 {
				t.Fatalf("v1: got %d bytes, want a close", len(got))
			}
		})
	}
	// A truncated header, then silence: nothing happens.
	nc, _ := net.Dial("tcp", data)
	nc.Write([]byte{1, 2, 3, 4, 5, 6, 7})
	nc.Close()
	after := append(append(append([]byte(nil), guardLow.Bytes()...), r.Bytes()...), guardHigh.Bytes()...)
	if !bytes.Equal(before, after) {
		t.Fatal("a refused request changed memory")
	}
	// The node still serves a good request on the same port: v2 WRITE,
	// then READ back on one connection (Mooncake's pooled lanes).
	nc, err := net.Dial("tcp", data)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(10 * time.Second))
	want := []byte("kvconnect serves Mooncake peers")
	mcRequest(nc, uint64(len(want)), base+100, 0x81, want)
	var st [8]byte
	if _, err := io.ReadFull(nc, st[:]); err != nil || binary.LittleEndian.Uint64(st[:]) != statusOK {
		t.Fatalf("good WRITE: status % x, %v", st, err)
	}
	if !bytes.Equal(r.Bytes()[100:100+len(want)], want) {
		t.Fatal("the good WRITE did not land")
	}
	mcRequest(nc, uint64(len(want)), base+100, 0x80, nil)
	got := make([]byte, 8+len(want))
	if _, err := io.ReadFull(nc, got); err != nil || binary.LittleEndian.Uint64(got) != statusOK || !bytes.Equal(got[8:], want) {
		t.Fatalf("good READ: % x, %v", got, err)
	}
}

// TestMooncakeInteropOff: with mooncake_interop off the node publishes no
// Mooncake TCP transport and its data port refuses Mooncake's protocol.
func TestMooncakeInteropOff(t *testing.T) {
	c, err := connector.New(context.Background(), connector.Config{Protocol: "tcp", PluginDir: pluginDir(t),
		MooncakeInterop: config.Bool(false)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := alloc(t, c, 4096)
	d := mooncakeView(t, c.SessionID())
	if d.Protocol == "tcp" || d.TCPDataPort != 0 {
		t.Fatalf("descriptor with interop off: protocol %q, data port %d", d.Protocol, d.TCPDataPort)
	}
	var ep string
	for _, tr := range d.KVConnect.Transports {
		ep = string(tr.Endpoint)
	}
	nc, err := net.Dial("tcp", ep)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(10 * time.Second))
	mcRequest(nc, 4, r.Addr(), 0x81, []byte("oops"))
	if got, _ := io.ReadAll(nc); len(got) != 0 || r.Bytes()[0] != 0 {
		t.Fatalf("interop off: the data port answered a Mooncake request (%d bytes)", len(got))
	}
	// kvconnect peers still reach it.
	a := newNode(t)
	src := alloc(t, a, 4096)
	if err := a.TransferSyncWrite(context.Background(), c.SessionID(), src.Addr(), r.Addr(), 4096); err != nil {
		t.Fatalf("a kvconnect peer of a node with interop off: %v", err)
	}
}

// TestOpenRDMAOnlyMooncakeNode: a Mooncake node that publishes only rdma
// gets an error saying so, naming its devices (Mooncake's
// NotSupportedTransport).
func TestOpenRDMAOnlyMooncakeNode(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	desc := `{"name":"` + ln.Addr().String() + `","protocol":"rdma","tcp_data_port":0,"tcp_proto_version":1,"timestamp":"x",` +
		`"devices":[{"name":"mlx5_0","lid":0,"gid":"fe80000000000000"},{"name":"mlx5_1","lid":0,"gid":"fe80000000000001"}],` +
		`"buffers":[{"name":"cpu:0","addr":140000000000000,"length":1048576,"rkey":[1,2],"lkey":[3,4]}],"priority_matrix":{}}` + "\n"
	go func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			var hdr [9]byte
			if _, err := io.ReadFull(nc, hdr[:]); err == nil {
				io.CopyN(io.Discard, nc, int64(binary.LittleEndian.Uint64(hdr[:8])-1))
				nc.Write(frame(hdr[8], desc))
			}
			nc.Close()
		}
	}()
	c := newNode(t)
	_, err = c.Open(context.Background(), ln.Addr().String())
	if !errors.Is(err, connector.ErrNoCommonTransport) || !strings.Contains(err.Error(), `"rdma"`) ||
		!strings.Contains(err.Error(), "mlx5_0, mlx5_1") || !strings.Contains(err.Error(), "MC_FORCE_TCP") {
		t.Fatalf("Open of an rdma-only Mooncake node: %v", err)
	}
}
