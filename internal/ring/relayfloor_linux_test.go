//go:build linux

package ring

import (
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The floor of one small op through a plugin, in plain Go: the topology
// of a ring batch with none of kvconnect's code. A "target" process
// answers 4 KiB requests over TCP with 16 bytes; the benchmark process
// (the host) sends them either itself ("direct", an in-process
// transport's op) or through a relay process (the plugin) it wakes, and
// that wakes it back, through shared memory: waiting on a futex in a
// goroutine (as the rings do) or on an eventfd in Go's network poller
// (the alternative, measured), or spinning on the word for up to
// relaySpin first and then on the futex (the rings while spinning pays):
// relay-<how the relay waits for the host>-<how the host waits for the
// relay>. The relay adds two
// cross-process wake-ups to the two of the TCP round trip; the ratio
// relay/direct is what the plugin's target (1.3) is measured against
// (docs/DATAPATH.md):
//
//	go test -run '^$' -bench RelayFloor -benchtime 3s ./internal/ring

const relayReq, relayResp = 4096, 16

// relaySpin is how long a "spin" side polls the word before it sleeps on
// the futex: the rings' spin cap (maxWorkerSpin, the host's Chooser).
const relaySpin = 100 * time.Microsecond

// relayEcho is the target: it answers each request on the connection
// fd 3 carries.
func relayEcho() {
	c, err := net.FileConn(os.NewFile(3, "conn"))
	if err != nil {
		panic(err)
	}
	req, resp := make([]byte, relayReq), make([]byte, relayResp)
	for {
		if _, err := io.ReadFull(c, req); err != nil {
			return
		}
		if _, err := c.Write(resp); err != nil {
			return
		}
	}
}

// relayWaker is one direction of the host–relay signal: a word in shared
// memory, and either a futex on it or an eventfd (the waiting side reads
// it through Go's network poller, the signaling side writes its raw
// descriptor, not registered with its poller).
type relayWaker struct {
	word *uint32
	ev   *os.File // the waiting side's, or nil
	evFD int      // the signaling side's, or -1
	spin bool     // the waiting side polls the word for relaySpin first
}

func (w relayWaker) wait(seen uint32) uint32 {
	var buf [8]byte
	if w.spin {
		end := time.Now().Add(relaySpin)
		for i := 0; ; i++ {
			if v := atomic.LoadUint32(w.word); v != seen {
				return v
			}
			if i%64 == 63 && time.Now().After(end) {
				break
			}
		}
	}
	for {
		if v := atomic.LoadUint32(w.word); v != seen {
			return v
		}
		if w.ev != nil {
			w.ev.Read(buf[:])
		} else {
			futexWait(w.word, seen, 0, Brief)
		}
	}
}

func (w relayWaker) post(v uint32) {
	atomic.StoreUint32(w.word, v)
	if w.evFD >= 0 {
		unix.Write(w.evFD, binary.NativeEndian.AppendUint64(nil, 1))
	} else {
		futexWake(w.word, 1)
	}
}

// relayKinds says how the relay waits for the host (ping) and the host
// for the relay (pong): mode is relay-<ping>-<pong>, each futex, event or
// spin.
func relayKinds(mode string) (ping, pong string) {
	fmt.Sscanf(strings.ReplaceAll(mode, "-", " "), "relay %s %s", &ping, &pong)
	return ping, pong
}

// relayWakers maps the words (fd 3) and uses the eventfds (fds 4 and 5)
// a mode needs: the relay waits on ping and signals pong.
func relayWakers(mode string) (ping, pong relayWaker) {
	p, q, _ := floorWords(3)
	pingKind, pongKind := relayKinds(mode)
	ping = relayWaker{word: p, evFD: -1, spin: pingKind == "spin"}
	pong = relayWaker{word: q, evFD: -1}
	if pingKind == "event" {
		ping.ev = os.NewFile(4, "ping") // non-blocking: the poller watches it
	}
	if pongKind == "event" {
		pong.evFD = 5
	}
	return ping, pong
}

// relayChild is the plugin: woken by the host, it does the op over TCP
// (the connection is fd 6) and wakes the host.
func relayChild(mode string) {
	ping, pong := relayWakers(mode)
	c, err := net.FileConn(os.NewFile(6, "conn"))
	if err != nil {
		panic(err)
	}
	req, resp := make([]byte, relayReq), make([]byte, relayResp)
	seen := uint32(0)
	for {
		seen = ping.wait(seen)
		if seen == ^uint32(0) {
			return
		}
		c.Write(req)
		io.ReadFull(c, resp)
		pong.post(seen)
	}
}

// socketPair returns a connected TCP pair over loopback: the host's end
// and the one a child gets.
func socketPair(b *testing.B) (net.Conn, *os.File) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	d, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	a, err := l.Accept()
	if err != nil {
		b.Fatal(err)
	}
	f, err := a.(*net.TCPConn).File()
	a.Close()
	if err != nil {
		b.Fatal(err)
	}
	return d, f
}

func startChild(b *testing.B, mode string, files ...*os.File) *exec.Cmd {
	child := exec.Command(os.Args[0], "-test.run=^$")
	child.Env = append(os.Environ(), floorChildEnv+"="+mode)
	child.ExtraFiles = files
	child.Stderr = os.Stderr
	if err := child.Start(); err != nil {
		b.Fatal(err)
	}
	return child
}

func BenchmarkRelayFloor(b *testing.B) {
	for _, mode := range []string{"direct", "relay-futex-futex", "relay-event-event", "relay-event-futex", "relay-futex-event",
		"relay-spin-spin", "relay-spin-futex", "relay-futex-spin"} {
		b.Run(mode, func(b *testing.B) {
			toTarget, targetEnd := socketPair(b)
			echo := startChild(b, "echo", targetEnd)
			targetEnd.Close()
			defer func() { toTarget.Close(); echo.Wait() }()
			samples := make([]time.Duration, 0, b.N)
			req, resp := make([]byte, relayReq), make([]byte, relayResp)
			if mode == "direct" {
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					t0 := time.Now()
					toTarget.Write(req)
					io.ReadFull(toTarget, resp)
					samples = append(samples, time.Since(t0))
				}
				b.StopTimer()
				reportP50(b, samples)
				return
			}
			// The relay gets the host's connection to the target; the
			// host only signals.
			connFile, err := toTarget.(*net.TCPConn).File()
			if err != nil {
				b.Fatal(err)
			}
			fd, memFile := floorMem(b)
			pingFD, pongFD := eventfd(b), eventfd(b)
			defer unix.Close(pingFD)
			pingFile, pongFile := dupFile(b, pingFD), dupFile(b, pongFD)
			relay := startChild(b, mode, memFile, pingFile, pongFile, connFile)
			connFile.Close()
			pingFile.Close()
			pongFile.Close()
			p, q, mem := floorWords(fd)
			defer unix.Munmap(mem)
			pingKind, pongKind := relayKinds(mode)
			ping, pong := relayWaker{word: p, evFD: -1}, relayWaker{word: q, evFD: -1, spin: pongKind == "spin"}
			if pingKind == "event" {
				ping.evFD = pingFD
			}
			if pongKind == "event" {
				pong.ev = os.NewFile(uintptr(pongFD), "pong") // the poller watches it
				defer pong.ev.Close()
			} else {
				defer unix.Close(pongFD)
			}
			b.ResetTimer()
			for i := 1; i <= b.N; i++ {
				t0 := time.Now()
				ping.post(uint32(i))
				pong.wait(uint32(i - 1))
				samples = append(samples, time.Since(t0))
			}
			b.StopTimer()
			ping.post(^uint32(0))
			if err := relay.Wait(); err != nil {
				b.Fatal(err)
			}
			reportP50(b, samples)
		})
	}
}

// eventfd makes a non-blocking eventfd.
func eventfd(b *testing.B) int {
	fd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		b.Fatal(err)
	}
	return fd
}

// dupFile is a copy of fd for a child.
func dupFile(b *testing.B, fd int) *os.File {
	dup, err := unix.Dup(fd)
	if err != nil {
		b.Fatal(err)
	}
	return os.NewFile(uintptr(dup), "event")
}

func reportP50(b *testing.B, samples []time.Duration) {
	if len(samples) == 0 {
		return
	}
	slices.Sort(samples)
	b.ReportMetric(float64(samples[len(samples)/2].Nanoseconds())/1e3, "p50-µs")
}
