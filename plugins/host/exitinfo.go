package host

import (
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"unicode/utf8"
)

// Errnos the diagnoses name (the syscall package has them on every
// platform).
const (
	errENOENT  = syscall.ENOENT
	errEACCES  = syscall.EACCES
	errENOEXEC = syscall.ENOEXEC
	errETXTBSY = syscall.ETXTBSY
)

var errnoNames = map[syscall.Errno]string{
	syscall.EPERM: "EPERM", syscall.ENOENT: "ENOENT", syscall.EINTR: "EINTR", syscall.EIO: "EIO",
	syscall.E2BIG: "E2BIG", syscall.ENOEXEC: "ENOEXEC", syscall.EAGAIN: "EAGAIN", syscall.ENOMEM: "ENOMEM",
	syscall.EACCES: "EACCES", syscall.EFAULT: "EFAULT", syscall.ENOTDIR: "ENOTDIR", syscall.EISDIR: "EISDIR",
	syscall.EINVAL: "EINVAL", syscall.ENFILE: "ENFILE", syscall.EMFILE: "EMFILE", syscall.ETXTBSY: "ETXTBSY",
	syscall.ENAMETOOLONG: "ENAMETOOLONG", syscall.ELOOP: "ELOOP", syscall.ENOSYS: "ENOSYS", syscall.ENOSPC: "ENOSPC",
	syscall.EROFS: "EROFS",
}

var signalNames = map[syscall.Signal]string{
	syscall.SIGHUP: "SIGHUP", syscall.SIGINT: "SIGINT", syscall.SIGQUIT: "SIGQUIT", syscall.SIGILL: "SIGILL",
	syscall.SIGTRAP: "SIGTRAP", syscall.SIGABRT: "SIGABRT", syscall.SIGBUS: "SIGBUS", syscall.SIGFPE: "SIGFPE",
	syscall.SIGKILL: "SIGKILL", syscall.SIGSEGV: "SIGSEGV", syscall.SIGPIPE: "SIGPIPE", syscall.SIGALRM: "SIGALRM",
	syscall.SIGTERM: "SIGTERM",
}

func errnoCode(e syscall.Errno) int64 { return int64(e) }

func errnoValue(err error) (syscall.Errno, bool) {
	var e syscall.Errno
	ok := errors.As(err, &e)
	return e, ok
}

// errnoOf returns the errno err wraps and its symbolic name, or 0, "".
func errnoOf(err error) (int64, string) {
	if e, ok := errnoValue(err); ok {
		return int64(e), errnoNames[e]
	}
	return 0, ""
}

// errnoWords is err's errno in words ("permission denied"), or err.
func errnoWords(err error) string {
	if e, ok := errnoValue(err); ok {
		return e.Error()
	}
	return err.Error()
}

// waitStatus is what exitInfo needs of os.ProcessState.Sys().
type waitStatus interface {
	Signaled() bool
	Signal() syscall.Signal
	CoreDump() bool
}

// exitInfo describes how a process ended: the native code and name for an
// errdefs.InitError (exit status, or signal number and name) and the same in words.
func exitInfo(st *os.ProcessState) (code int64, name, words string) {
	if ws, ok := st.Sys().(waitStatus); ok && ws.Signaled() {
		sig := ws.Signal()
		name = signalNames[sig]
		if name == "" {
			name = "signal " + strconv.Itoa(int(sig))
		}
		words = fmt.Sprintf("was killed by %s (%v)", name, sig)
		if ws.CoreDump() {
			words += ", core dumped"
		}
		return int64(sig), name, words
	}
	c := st.ExitCode()
	if c == 0 {
		return 0, "exit status 0", "exited with status 0"
	}
	return int64(c), "exit status", fmt.Sprintf("exited with status %d", c)
}

func killedBySIGKILL(st *os.ProcessState) bool {
	ws, ok := st.Sys().(waitStatus)
	return ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL
}

// interpreter is the program interpreter a binary asks the kernel for: the
// ELF PT_INTERP (the dynamic loader) or a script's #! program; "" if none.
func interpreter(path string) string {
	if f, err := elf.Open(path); err == nil {
		defer f.Close()
		for _, p := range f.Progs {
			if p.Type == elf.PT_INTERP {
				b, err := io.ReadAll(io.LimitReader(p.Open(), 4096))
				if err == nil {
					return strings.TrimRight(string(b), "\x00")
				}
			}
		}
		return ""
	}
	head := fileHead(path, 256)
	if rest, ok := bytes.CutPrefix(head, []byte("#!")); ok {
		line, _, _ := bytes.Cut(rest, []byte("\n"))
		if f := strings.Fields(string(line)); len(f) > 0 {
			return f[0]
		}
	}
	return ""
}

func fileHead(path string, n int) []byte {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	b := make([]byte, n)
	m, _ := io.ReadFull(f, b)
	return b[:m]
}

// elfMachines maps GOARCH to the ELF machine of binaries built for it.
var elfMachines = map[string]elf.Machine{
	"amd64": elf.EM_X86_64, "386": elf.EM_386, "arm64": elf.EM_AARCH64, "arm": elf.EM_ARM,
	"ppc64": elf.EM_PPC64, "ppc64le": elf.EM_PPC64, "s390x": elf.EM_S390, "riscv64": elf.EM_RISCV,
	"loong64": elf.EM_LOONGARCH, "mips": elf.EM_MIPS, "mipsle": elf.EM_MIPS, "mips64": elf.EM_MIPS, "mips64le": elf.EM_MIPS,
}

// describeBinary says what kind of file path is, for a binary the kernel
// refused to run (ENOEXEC).
func describeBinary(path string) string {
	head := fileHead(path, 64)
	switch {
	case len(head) == 0:
		return "the file is empty"
	case bytes.HasPrefix(head, []byte("\x7fELF")):
		f, err := elf.Open(path)
		if err != nil {
			return fmt.Sprintf("a damaged ELF file (%v)", err)
		}
		defer f.Close()
		bits := 64
		if f.Class == elf.ELFCLASS32 {
			bits = 32
		}
		want, known := elfMachines[runtime.GOARCH]
		switch {
		case f.Type != elf.ET_EXEC && f.Type != elf.ET_DYN:
			return fmt.Sprintf("an ELF %v, not an executable", f.Type)
		case known && f.Machine != want:
			return fmt.Sprintf("an ELF %d-bit executable for %v, but this host is %s (%v)", bits, f.Machine, hostPlatform(), want)
		}
		return fmt.Sprintf("an ELF %d-bit executable for %v that the kernel still refused (truncated or corrupt?)", bits, f.Machine)
	case bytes.HasPrefix(head, []byte("#!")):
		return "a script whose interpreter cannot be run"
	case bytes.HasPrefix(head, []byte("MZ")):
		return "a Windows (PE) executable"
	case bytes.HasPrefix(head, []byte{0xcf, 0xfa, 0xed, 0xfe}), bytes.HasPrefix(head, []byte{0xfe, 0xed, 0xfa, 0xcf}),
		bytes.HasPrefix(head, []byte{0xca, 0xfe, 0xba, 0xbe}):
		return "a macOS (Mach-O) executable"
	case utf8.Valid(head) && !bytes.ContainsRune(head, 0):
		line, _, _ := bytes.Cut(head, []byte("\n"))
		return fmt.Sprintf("a text file without a #! line (it starts with %q)", line)
	}
	return fmt.Sprintf("neither an ELF executable nor a script (it starts with bytes % x)", head[:min(len(head), 8)])
}

func hostOS() string       { return runtime.GOOS }
func hostArch() string     { return runtime.GOARCH }
func hostPlatform() string { return runtime.GOOS + "/" + runtime.GOARCH }
