//go:build linux

package ring

import (
	"bytes"
	"fmt"
	"os"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/kvconnect/kvconnect/errdefs"
)

// Doorbell is an eventfd the host rings and the plugin's SQ sleeper
// waits on through the Go runtime's network poller, while batches come
// concurrently (SQBell; docs/DATAPATH-ROUNDS.md, twentieth round). A futex
// sleep goes through the runtime's system-call path, and leaving it
// while the process was idle wakes the runtime's monitor (sysmon), which
// then polls every 20 µs for a millisecond, each poll a context switch:
// 2.2–4.6 of them per 64 KiB batch in the initiator's plugin. A
// goroutine parked in the poller wakes no monitor. Both ends use raw
// system calls.
//
// Ring may be called from any goroutine; one goroutine at a time calls
// Wait; Interrupt and Close may be called at any time, Close once the
// others are done.
type Doorbell struct {
	f  *os.File
	rc syscall.RawConn // the plugin's end: reads wait in the poller
	fd int
}

// NewDoorbell creates the host's end: an eventfd to send to the plugin
// (File). It is left in blocking mode, since sending it over the fd
// channel (os.File.Fd) would put it there anyway; the plugin makes it
// non-blocking, for both ends (OpenDoorbell).
func NewDoorbell() (*Doorbell, error) {
	fd, err := unix.Eventfd(0, unix.EFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("ring: doorbell: eventfd: %w", err)
	}
	return &Doorbell{f: os.NewFile(uintptr(fd), "kvconnect:doorbell"), fd: fd}, nil
}

// OpenDoorbell takes the plugin's end from f, a descriptor the host sent:
// it must be an eventfd. f is closed either way; the doorbell holds a
// duplicate, non-blocking and registered with the runtime's poller.
func OpenDoorbell(f *os.File) (*Doorbell, error) {
	defer f.Close()
	rc, err := f.SyscallConn()
	if err != nil {
		return nil, fmt.Errorf("ring: doorbell: %w", err)
	}
	nfd := -1
	var derr error
	if err := rc.Control(func(fd uintptr) { nfd, derr = unix.FcntlInt(fd, unix.F_DUPFD_CLOEXEC, 0) }); err != nil {
		return nil, fmt.Errorf("ring: doorbell: %w", err)
	}
	if derr != nil {
		return nil, fmt.Errorf("ring: doorbell: duplicating the descriptor: %w", derr)
	}
	info, err := os.ReadFile(fmt.Sprintf("/proc/self/fdinfo/%d", nfd))
	if err == nil && !bytes.Contains(info, []byte("eventfd-count:")) {
		unix.Close(nfd)
		return nil, fmt.Errorf("ring: doorbell: the descriptor the host sent is not an eventfd: %w", errdefs.ErrInvalidArgument)
	}
	if err := unix.SetNonblock(nfd, true); err != nil {
		unix.Close(nfd)
		return nil, fmt.Errorf("ring: doorbell: %w", err)
	}
	d := &Doorbell{f: os.NewFile(uintptr(nfd), "kvconnect:doorbell"), fd: nfd}
	if d.rc, err = d.f.SyscallConn(); err != nil {
		d.f.Close()
		return nil, fmt.Errorf("ring: doorbell: %w", err)
	}
	return d, nil
}

// File is the descriptor to send to the plugin (the host's end).
func (d *Doorbell) File() *os.File { return d.f }

// Ring wakes the goroutine waiting on the doorbell, or makes its next
// Wait return at once. Raw, as futexWake is.
func (d *Doorbell) Ring() {
	one := uint64(1)
	unix.RawSyscall(unix.SYS_WRITE, uintptr(d.fd), uintptr(unsafe.Pointer(&one)), 8)
}

// Wait returns once the doorbell was rung since the last Wait, parking
// the goroutine in the runtime's poller meanwhile; an error once it was
// interrupted (Interrupt) or closed.
func (d *Doorbell) Wait() error {
	var n uint64
	var errno syscall.Errno
	err := d.rc.Read(func(fd uintptr) bool {
		_, _, errno = unix.RawSyscall(unix.SYS_READ, fd, uintptr(unsafe.Pointer(&n)), 8)
		return errno != unix.EAGAIN
	})
	if err != nil {
		return fmt.Errorf("ring: doorbell: %w", err)
	}
	if errno != 0 {
		return fmt.Errorf("ring: doorbell: read: %w", errno)
	}
	return nil
}

// Interrupt ends the current Wait and every later one with an error.
func (d *Doorbell) Interrupt() { d.f.SetReadDeadline(time.Unix(1, 0)) }

// Close releases the descriptor. It is idempotent.
func (d *Doorbell) Close() { d.f.Close() }
